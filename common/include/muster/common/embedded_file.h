// A file built into a binary (cmake/EmbedFiles.cmake), served by URL path.
#ifndef MUSTER_COMMON_EMBEDDED_FILE_H_
#define MUSTER_COMMON_EMBEDDED_FILE_H_

#include <cstddef>

namespace muster {

struct EmbeddedFile {
  const char* path;           // the URL path it is served at
  const unsigned char* data;  // followed by a NUL not counted in size
  size_t size;
};

}  // namespace muster

#endif  // MUSTER_COMMON_EMBEDDED_FILE_H_
