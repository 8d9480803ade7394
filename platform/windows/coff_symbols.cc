#include "platform/windows/coff_symbols.h"

#include <algorithm>
#include <cstring>
#include <iterator>

#include "absl/strings/strip.h"

namespace muster::platform::windows {
namespace {

// Little-endian reads that fail (false) past the end instead of reading it:
// the file is whatever is on disk, not trusted.
bool Read16(absl::string_view b, size_t at, uint16_t* out) {
  if (at > b.size() || b.size() - at < 2) return false;
  const auto* p = reinterpret_cast<const unsigned char*>(b.data() + at);
  *out = static_cast<uint16_t>(p[0] | p[1] << 8);
  return true;
}

bool Read32(absl::string_view b, size_t at, uint32_t* out) {
  if (at > b.size() || b.size() - at < 4) return false;
  const auto* p = reinterpret_cast<const unsigned char*>(b.data() + at);
  *out = static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
         static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24;
  return true;
}

// The PE/COFF layout (the Microsoft PE format specification).
constexpr size_t kSymbolSize = 18;
constexpr size_t kSectionHeaderSize = 40;
constexpr uint16_t kTypeFunction = 0x20;  // DTYPE_FUNCTION << 4
constexpr uint8_t kClassExternal = 2;
constexpr uint8_t kClassStatic = 3;

struct Section {
  uint32_t rva = 0;
  uint32_t size = 0;
};

}  // namespace

CoffFunctions CoffFunctions::Parse(absl::string_view image) {
  CoffFunctions table;
  uint32_t pe = 0;
  if (image.substr(0, 2) != "MZ" || !Read32(image, 0x3c, &pe) ||
      image.substr(pe, 4) != absl::string_view("PE\0\0", 4))
    return table;
  const size_t header = pe + 4;  // IMAGE_FILE_HEADER
  uint16_t sections = 0, optional_size = 0;
  uint32_t symbols_at = 0, symbols = 0;
  if (!Read16(image, header + 2, &sections) ||
      !Read32(image, header + 8, &symbols_at) ||
      !Read32(image, header + 12, &symbols) ||
      !Read16(image, header + 16, &optional_size) || symbols_at == 0 ||
      symbols == 0)
    return table;
  std::vector<Section> section_table;
  const size_t section_headers = header + 20 + optional_size;
  for (uint16_t i = 0; i < sections; ++i) {
    Section s;
    const size_t at = section_headers + i * kSectionHeaderSize;
    if (!Read32(image, at + 8, &s.size) || !Read32(image, at + 12, &s.rva))
      return table;
    section_table.push_back(s);
  }
  const size_t strings = symbols_at + size_t{symbols} * kSymbolSize;
  if (strings > image.size()) return table;
  const absl::string_view string_table = image.substr(strings);
  for (uint32_t i = 0; i < symbols; ++i) {
    const size_t at = symbols_at + size_t{i} * kSymbolSize;
    uint32_t value = 0;
    uint16_t section = 0, type = 0;
    if (!Read32(image, at + 8, &value) || !Read16(image, at + 12, &section) ||
        !Read16(image, at + 14, &type))
      break;
    const auto storage = static_cast<uint8_t>(image[at + 16]);
    const auto aux = static_cast<uint8_t>(image[at + 17]);
    // Functions, and the section symbols of -ffunction-sections
    // (".text$NAME", class static): the only name left of a static
    // function whose own symbol the compiler dropped (libstdc++'s
    // execute_native_thread_routine, under every std::thread).
    const bool candidate =
        (type == kTypeFunction || type == 0) &&
        (storage == kClassExternal || storage == kClassStatic) &&
        section >= 1 && section <= section_table.size();
    if (candidate) {
      // The name: inline when it fits 8 bytes, else (4 zero bytes) an
      // offset into the string table that follows the symbols.
      absl::string_view name_view;
      uint32_t zeros = 0, offset = 0;
      Read32(image, at, &zeros);
      if (zeros == 0 && Read32(image, at + 4, &offset) &&
          offset < string_table.size()) {
        const absl::string_view rest = string_table.substr(offset);
        name_view = rest.substr(0, rest.find('\0'));
      } else if (zeros != 0) {
        const absl::string_view inline_name = image.substr(at, 8);
        name_view = inline_name.substr(0, inline_name.find('\0'));
      }
      bool from_section = false;
      if (type != kTypeFunction) {
        from_section = absl::ConsumePrefix(&name_view, ".text$");
        if (!from_section || storage != kClassStatic) name_view = "";
      }
      const Section& s = section_table[section - 1];
      if (!name_view.empty() && value < s.size) {
        table.functions_.push_back({s.rva + value, s.rva + s.size, from_section,
                                    std::string(name_view)});
      }
    }
    i += aux;
  }
  // By address; at one address a function's own symbol before its
  // section's; of two names (a C++ constructor's C1 and C2) either will do,
  // but the choice must not vary between runs.
  std::sort(table.functions_.begin(), table.functions_.end(),
            [](const Function& a, const Function& b) {
              if (a.rva != b.rva) return a.rva < b.rva;
              if (a.from_section != b.from_section) return !a.from_section;
              return a.name < b.name;
            });
  return table;
}

std::string CoffFunctions::NameAt(uint32_t rva) const {
  auto it =
      std::upper_bound(functions_.begin(), functions_.end(), rva,
                       [](uint32_t r, const Function& f) { return r < f.rva; });
  if (it == functions_.begin()) return "";
  --it;
  // Back to the first of the names at that address.
  while (it != functions_.begin() && std::prev(it)->rva == it->rva) --it;
  if (rva >= it->section_end) return "";
  return it->name;
}

}  // namespace muster::platform::windows
