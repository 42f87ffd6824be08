#!/usr/bin/env bash
# scripts/first_run_prose.awk on a reST sample with one case of each thing it drops or keeps
# (titles, directives and what is indented under them, a literal block, doctest, grid and simple
# tables, a field, a definition term, a short line, a constant in capitals; a note's and an API
# entry's body, a list item, a definition, inline roles): the output must be the sample's prose,
# which first_run_prose_expected.txt holds as read off the sample by hand.
set -euo pipefail
root=$1
here=$root/tests/scripts
diff -u "$here/first_run_prose_expected.txt" \
  <(awk -f "$root/scripts/first_run_prose.awk" "$here/first_run_prose_sample.rst")
echo "first_run_prose: the sample's prose, exactly"
