#include "muster/platform/files.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "platform/src/replaceable.h"

namespace muster::platform {

std::string DescribeNonRegularFile(const std::string& path) {
  struct stat st;
  // Absent (or unreachable: the write says why).
  if (lstat(path.c_str(), &st) != 0) return "";
  if (S_ISREG(st.st_mode)) return "";
  if (S_ISDIR(st.st_mode)) return "a directory";
  if (S_ISLNK(st.st_mode)) return "a symbolic link";
  if (S_ISCHR(st.st_mode)) return "a character device";
  if (S_ISBLK(st.st_mode)) return "a block device";
  if (S_ISFIFO(st.st_mode)) return "a FIFO";
  if (S_ISSOCK(st.st_mode)) return "a socket";
  return "not a regular file";
}

absl::Status WriteFileAtomically(const std::string& path,
                                 absl::string_view contents, int mode,
                                 Durability durability) {
  const bool durable = durability == Durability::kDurable;
  if (absl::Status ok = internal::CheckReplaceable(path); !ok.ok()) return ok;
  const std::string tmp = absl::StrCat(path, ".tmp.", getpid());
  // O_EXCL | O_NOFOLLOW: never write through something already there.
  const int fd =
      open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
           static_cast<mode_t>(mode));
  if (fd < 0) {
    return absl::InternalError(
        absl::StrCat("cannot create ", tmp, ": ", std::strerror(errno)));
  }
  size_t done = 0;
  int saved = 0;
  while (done < contents.size()) {
    const ssize_t n = write(fd, contents.data() + done, contents.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      saved = n < 0 ? errno : EIO;
      break;
    }
    done += static_cast<size_t>(n);
  }
  // Durable: the bytes reach the disk before the rename makes them the file
  // (as FlushFileBuffers does on Windows).
  if (durable && done == contents.size() && fsync(fd) != 0) saved = errno;
  close(fd);
  if (done < contents.size() || saved != 0) {
    std::remove(tmp.c_str());
    return absl::InternalError(
        absl::StrCat("cannot write ", tmp, ": ", std::strerror(saved)));
  }
  if (std::string what = DescribeNonRegularFile(path); !what.empty()) {
    std::remove(tmp.c_str());
    return absl::FailedPreconditionError(
        absl::StrCat(path, " became ", what, "; not replacing it"));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    return absl::InternalError(absl::StrCat("cannot rename ", tmp, " to ", path,
                                            ": ", std::strerror(err)));
  }
  if (!durable) return absl::OkStatus();
  // And the rename itself (MOVEFILE_WRITE_THROUGH on Windows).
  const std::string dir = std::filesystem::path(path).parent_path().string();
  const int dfd =
      open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    fsync(dfd);
    close(dfd);
  }
  return absl::OkStatus();
}

std::optional<absl::Time> ModificationTime(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return std::nullopt;
  return absl::TimeFromTimespec(st.st_mtim);
}

absl::StatusOr<std::string> MakeTempDirectory(const std::string& prefix,
                                              const std::string& parent) {
  std::error_code ec;
  const std::filesystem::path base =
      parent.empty() ? std::filesystem::temp_directory_path(ec)
                     : std::filesystem::path(parent);
  std::string tmpl = (base / (prefix + "XXXXXX")).string();
  if (mkdtemp(tmpl.data()) == nullptr) {
    return absl::InternalError(
        absl::StrCat("cannot create ", tmpl, ": ", std::strerror(errno)));
  }
  return tmpl;
}

absl::Status MakePrivateDirectory(const std::string& path) {
  std::error_code ec;
  const std::filesystem::path p(path);
  if (p.has_parent_path())
    std::filesystem::create_directories(p.parent_path(), ec);
  if (mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) {
    return absl::InternalError(
        absl::StrCat("cannot create ", path, ": ", std::strerror(errno)));
  }
  if (chmod(path.c_str(), 0700) != 0) {
    return absl::InternalError(
        absl::StrCat("cannot create ", path, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<FileLock>> FileLock::TryLock(
    const std::string& path) {
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::InternalError(
        absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
  }
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    close(fd);
    if (err == EWOULDBLOCK) {
      return absl::UnavailableError(
          absl::StrCat(path, " is locked by another process"));
    }
    return absl::InternalError(
        absl::StrCat("cannot lock ", path, ": ", std::strerror(err)));
  }
  return std::unique_ptr<FileLock>(new FileLock(fd));
}

FileLock::~FileLock() { close(handle_); }

}  // namespace muster::platform
