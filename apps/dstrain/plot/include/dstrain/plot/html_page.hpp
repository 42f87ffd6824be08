// A self-contained HTML page: inline style, no script, nothing fetched, so it opens from a file on
// a machine without a network. Headings, text, SVG elements and tables, in the order added.
#pragma once

#include <string>
#include <vector>

namespace ds::plot {

class HtmlPage {
 public:
  explicit HtmlPage(const std::string& title);

  void add_heading(const std::string& text);
  void add_text(const std::string& text);
  void add_svg(const std::string& svg);  // an element from a render_svg, inserted as it is
  void add_table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows);

  std::string html() const;

 private:
  std::string title_;
  std::string body_;
};

}  // namespace ds::plot
