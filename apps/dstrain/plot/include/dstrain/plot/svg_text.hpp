// Text as it goes into an SVG or HTML page: escaped, and numbers written the way a reader expects.
#pragma once

#include <string>
#include <string_view>

namespace ds::plot {

// & < > " ' as entities, so any text (a file name, a run name) is safe in elements and attributes.
std::string escape_xml(std::string_view text);

// A coordinate in the page: two decimals, enough for a pixel.
std::string coordinate(double value);

}  // namespace ds::plot
