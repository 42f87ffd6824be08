# The running English of a reStructuredText file, one paragraph a line: what the first run trains on
# (scripts/run.sh, prepare_first_run_data). A language model learns what it sees most; in the raw
# reST that is indentation, tables, directives and code, so all of it goes and only prose stays.
#
# Dropped: section titles and their underlines, directives and comments (`.. x::`, `.. _label:`)
# with everything indented under them, a paragraph ending in `::` with its literal block, doctest
# (`>>>`) and table blocks, field and option lists, definition-list terms; then any paragraph that
# does not read as prose (too short, not ending a sentence, code characters or capital constants
# left). Kept: paragraphs, list items, definitions and the bodies of the directives that describe
# in sentences (API entries, notes, warnings, glossaries), with inline markup turned into its text
# (:ref:`text <x>` -> text, :func:`~a.b` -> b, ``code`` -> code, :pep:`8` -> PEP 8, *emphasis* ->
# emphasis).
#
# Usage: awk -f first_run_prose.awk FILE.rst > FILE.txt (POSIX awk; Debian's mawk runs it).

function indent_of(line) {
  match(line, /^ */)
  return RLENGTH
}

# A line of one repeated punctuation character: a section's underline or overline, or a transition.
function is_adornment(text,    first, rest) {
  if (length(text) < 3 || text !~ /^[-=~^"*#+'`:._<>]+$/) return 0
  first = substr(text, 1, 1)
  rest = text
  while (length(rest) > 0 && substr(rest, 1, 1) == first) rest = substr(rest, 2)
  return rest == ""
}

# The text a role shows: `text <target>` shows text, `~a.b.c` shows c, `!name` shows name.
function role_text(inner) {
  if (match(inner, / *<[^<>]*>$/) && RSTART > 1) return substr(inner, 1, RSTART - 1)
  if (substr(inner, 1, 1) == "!") return substr(inner, 2)
  if (substr(inner, 1, 1) == "~") {
    inner = substr(inner, 2)
    while (match(inner, /[.]/)) inner = substr(inner, RSTART + 1)
  }
  return inner
}

# Replaces each match of re in s by role_text of the part between its first and last backtick.
# re is a string: a /regex/ argument would be matched against $0 and passed as 0 or 1.
function replace_roles(s, re,    out, m, open, role) {
  out = ""
  while (match(s, re)) {
    m = substr(s, RSTART, RLENGTH)
    out = out substr(s, 1, RSTART - 1)
    s = substr(s, RSTART + RLENGTH)
    open = index(m, "`")
    role = substr(m, 1, open - 1)
    m = substr(m, open + 1)
    sub(/`+_*$/, "", m)
    out = out role_prefix[role] role_text(m)
  }
  return out s
}

# Replaces each match of re in s by the match less `strip` characters at either end.
function unwrap(s, re, strip,    out) {
  out = ""
  while (match(s, re)) {
    out = out substr(s, 1, RSTART - 1) substr(s, RSTART + strip, RLENGTH - 2 * strip)
    s = substr(s, RSTART + RLENGTH)
  }
  return out s
}

function plain_text(s) {
  s = replace_roles(s, ":[a-zA-Z][-a-zA-Z0-9:+]*:`[^`]+`")     # :func:`x`, :ref:`text <x>`
  s = unwrap(s, "``[^`]+``", 2)                                # ``code``
  s = replace_roles(s, "`[^`]+`__?")                           # `text <url>`_, `text`__
  s = replace_roles(s, "`[^`]+`")                              # `default role`
  gsub(/ ?\[(#[a-zA-Z0-9_-]*|[0-9]+|\*)\]_/, "", s)            # footnote references
  s = unwrap(s, "[*][*][^*]+[*][*]", 2)
  s = unwrap(s, "[*][^* ][^*]*[*]", 1)
  gsub(/\\ /, "", s)                                           # "\ " joins markup to a word
  gsub(/\\/, "", s)
  gsub(/[ \t]+/, " ", s)
  sub(/^ /, "", s)
  sub(/ $/, "", s)
  return s
}

# Prose: a dozen words or more, starting like a sentence, ending one, with no code characters left
# and no constants in capitals (CONFIG_SMP, O_RDONLY): a small model that sees those writes runs of
# capitals and underscores.
function is_prose(s,    words, unused) {
  words = split(s, unused, " ")
  if (words < 12) return 0
  if (s !~ /^["'(]?[A-Z0-9]/) return 0
  if (s !~ /[.?!]["')]?$/) return 0
  if (s ~ /[`|{}\[\]<>=#$\\@~^]|::|>>>|[.][.][.]/) return 0
  if (s ~ /[A-Z0-9]_|_[A-Z]/) return 0
  return 1
}

function flush(    text) {
  if (paragraph == "") return
  if (paragraph ~ /::$/) {                  # introduces a literal block: both go
    skip_deeper_than = paragraph_indent
  } else {
    text = plain_text(paragraph)
    if (is_prose(text)) print text
  }
  paragraph = ""
  paragraph_lines = 0
}

function start_paragraph(text, indent) {
  paragraph = text
  paragraph_indent = indent
  paragraph_lines = 1
}

BEGIN {
  skip_deeper_than = -1
  skip_to_blank = 0
  table_borders = 0
  # Roles that show a bare number: :pep:`8` reads "PEP 8".
  role_prefix[":pep:"] = "PEP "
  role_prefix[":rfc:"] = "RFC "
  role_prefix[":issue:"] = "bpo-"
  role_prefix[":gh:"] = "gh-"
  # Directives whose body describes something in sentences: an API entry, an admonition, a glossary.
  prose_directive = "^[.][.] ((py|c|cpp):)?(function|method|class|attribute|data|exception|decorator|" \
                    "decoratormethod|classmethod|staticmethod|abstractmethod|coroutinefunction|" \
                    "coroutinemethod|opcode|describe|envvar|option|cmdoption|program|macro|type|member|" \
                    "var|struct|union|enum|enumerator|note|warning|important|tip|hint|attention|" \
                    "caution|danger|admonition|impl-detail|glossary|only|container|topic|sidebar)::"
}

{
  sub(/\r$/, "")
  gsub(/\t/, "        ")
  indent = indent_of($0)
  text = substr($0, indent + 1)
  sub(/ +$/, "", text)

  if (text == "") {
    if (skip_to_blank && (table_borders == 0 || last_was_border)) { skip_to_blank = 0; table_borders = 0 }
    flush()
    next
  }
  if (skip_deeper_than >= 0) {
    if (indent > skip_deeper_than) next
    skip_deeper_than = -1
  }
  if (skip_to_blank) {
    last_was_border = (text ~ /^=+( +=+)+$/)
    if (last_was_border) table_borders++
    next
  }
  if (is_adornment(text)) {                 # the paragraph before it was a title
    paragraph = ""
    paragraph_lines = 0
    next
  }
  if (text ~ prose_directive) {             # its body is prose; its signature lines are not
    flush()
    skip_to_blank = 1
    table_borders = 0
    next
  }
  if (text ~ /^\.\.( |$)/ || text ~ /^:[^`: ][^`:]*:( |$)/ || text ~ /^--?[a-zA-Z]/) {
    flush()                                 # directive, comment, field or option
    skip_deeper_than = indent
    next
  }
  if (text ~ /^=+( +=+)+$/) {               # simple table
    flush()
    skip_to_blank = 1
    table_borders = 1
    last_was_border = 1
    next
  }
  if (text ~ /^(>>>|[+|])/) {               # doctest, grid table, line block
    flush()
    skip_to_blank = 1
    table_borders = 0
    next
  }
  if (match(text, /^([-*+]|#\.|[0-9]+\.|\(?[0-9a-z]\)) +/)) {    # a list item: its text is a paragraph
    flush()
    start_paragraph(substr(text, RLENGTH + 1), indent + RLENGTH)
    next
  }
  if (paragraph != "" && indent > paragraph_indent && paragraph_lines == 1) {
    start_paragraph(text, indent)           # a definition: the line before was its term
    next
  }
  if (paragraph == "") start_paragraph(text, indent)
  else { paragraph = paragraph " " text; paragraph_lines++ }
}

END { flush() }
