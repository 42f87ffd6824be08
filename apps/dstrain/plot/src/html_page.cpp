#include "dstrain/plot/html_page.hpp"

#include "dstrain/plot/svg_text.hpp"

namespace ds::plot {

HtmlPage::HtmlPage(const std::string& title) : title_(title) {}

void HtmlPage::add_heading(const std::string& text) { body_ += "<h2>" + escape_xml(text) + "</h2>\n"; }

void HtmlPage::add_text(const std::string& text) { body_ += "<p>" + escape_xml(text) + "</p>\n"; }

void HtmlPage::add_svg(const std::string& svg) { body_ += "<figure>\n" + svg + "</figure>\n"; }

void HtmlPage::add_table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows) {
  body_ += "<table>\n<tr>";
  for (const std::string& cell : header) body_ += "<th>" + escape_xml(cell) + "</th>";
  body_ += "</tr>\n";
  for (const auto& row : rows) {
    body_ += "<tr>";
    for (const std::string& cell : row) body_ += "<td>" + escape_xml(cell) + "</td>";
    body_ += "</tr>\n";
  }
  body_ += "</table>\n";
}

std::string HtmlPage::html() const {
  return "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>" + escape_xml(title_) +
         "</title>\n<style>\n"
         "body { font-family: sans-serif; margin: 24px; color: #222; background: #fff; }\n"
         "figure { margin: 12px 0 24px 0; }\n"
         "table { border-collapse: collapse; margin-bottom: 16px; }\n"
         "th, td { border: 1px solid #ccc; padding: 3px 10px; text-align: left; }\n"
         "</style>\n</head>\n<body>\n<h1>" +
         escape_xml(title_) + "</h1>\n" + body_ + "</body>\n</html>\n";
}

}  // namespace ds::plot
