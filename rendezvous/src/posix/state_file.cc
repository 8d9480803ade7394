#include "rendezvous/src/state_file.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"

namespace muster::rendezvous {
namespace {

std::string Err() { return strerror(errno); }

}  // namespace

absl::Status PrepareStateDir(const std::string& dir) {
  if (dir.empty())
    return absl::InvalidArgumentError("--state-dir: the path is empty");
  struct stat st;
  if (lstat(dir.c_str(), &st) != 0) {
    if (errno != ENOENT || mkdir(dir.c_str(), 0700) != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--state-dir=", dir, ": cannot create it: ", Err(),
                       "; create the directory or choose another path"));
    }
  } else if (!S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--state-dir=", dir,
        " is not a directory (a file, device or symbolic link); give a "
        "directory that only musterd uses"));
  }
  if (access(dir.c_str(), W_OK | X_OK) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--state-dir=", dir, ": not writable: ", Err(),
                     "; give musterd's user write access"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadStateFile(const std::string& dir,
                                          const std::string& name) {
  const std::string path = absl::StrCat(dir, "/", name);
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return absl::NotFoundError(path);
    return absl::UnavailableError(absl::StrCat(path, ": ", Err()));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, " is not a regular file; remove it (musterd writes it)"));
  }
  int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return absl::UnavailableError(absl::StrCat(path, ": ", Err()));
  std::string out;
  char buf[65536];
  while (true) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const std::string why = Err();
      close(fd);
      return absl::UnavailableError(absl::StrCat(path, ": ", why));
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return out;
}

absl::Status WriteStateFile(const std::string& dir, const std::string& name,
                            const std::string& contents) {
  const std::string path = absl::StrCat(dir, "/", name);
  const std::string tmp = absl::StrCat(dir, "/.", name, ".tmp");
  struct stat st;
  if (lstat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, " is not a regular file; it is left alone (remove it)"));
  }
  unlink(tmp.c_str());  // a leftover of a killed write
  int fd = open(tmp.c_str(),
                O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0)
    return absl::UnavailableError(absl::StrCat("create ", tmp, ": ", Err()));
  size_t done = 0;
  while (done < contents.size()) {
    ssize_t n = write(fd, contents.data() + done, contents.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const std::string why = Err();
      close(fd);
      unlink(tmp.c_str());
      return absl::UnavailableError(absl::StrCat("write ", tmp, ": ", why));
    }
    done += static_cast<size_t>(n);
  }
  if (fsync(fd) != 0) {
    const std::string why = Err();
    close(fd);
    unlink(tmp.c_str());
    return absl::UnavailableError(absl::StrCat("fsync ", tmp, ": ", why));
  }
  close(fd);
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = Err();
    unlink(tmp.c_str());
    return absl::UnavailableError(absl::StrCat("rename to ", path, ": ", why));
  }
  int dfd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    fsync(dfd);
    close(dfd);
  }
  return absl::OkStatus();
}

}  // namespace muster::rendezvous
