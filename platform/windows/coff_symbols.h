// The function names of a MinGW-built PE image's COFF symbol table, for the
// stack reader (stack_reader_windows.cc). DbgHelp reads PDBs; MinGW writes
// none, and wine's DbgHelp, which reads DWARF, skips the COFF table whenever
// an image has any DWARF at all (which the MinGW runtime's own objects
// bring), so a release build's functions would have no names. The COFF
// table names every function ld kept, Itanium-mangled. Private to
// platform/windows.
#ifndef MUSTER_PLATFORM_WINDOWS_COFF_SYMBOLS_H_
#define MUSTER_PLATFORM_WINDOWS_COFF_SYMBOLS_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"

namespace muster::platform::windows {

class CoffFunctions {
 public:
  // The functions of the image file's bytes; none when it has no symbol
  // table (stripped, or not built by MinGW) or is not a PE image.
  static CoffFunctions Parse(absl::string_view image);

  // The name of the function at relative virtual address `rva` (the
  // nearest function at or below it, in the same section), as the table
  // spells it; empty when none.
  std::string NameAt(uint32_t rva) const;

  bool empty() const { return functions_.empty(); }
  size_t size() const { return functions_.size(); }

 private:
  struct Function {
    uint32_t rva = 0;
    uint32_t section_end = 0;   // the RVA just past its section
    bool from_section = false;  // named after its section (".text$NAME")
    std::string name;
  };
  std::vector<Function> functions_;  // by rva
};

}  // namespace muster::platform::windows

#endif  // MUSTER_PLATFORM_WINDOWS_COFF_SYMBOLS_H_
