#include "platform/posix/output_reader.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <cstdint>
#include <system_error>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "muster/platform/logging.h"

namespace muster::platform::posix {

Shared::~Shared() {
  if (reader_wake_fd >= 0) close(reader_wake_fd);
}

absl::StatusOr<UniqueFd> OpenLogFile(const std::filesystem::path& path) {
  std::error_code ec;
  std::filesystem::create_directories(path.parent_path(), ec);
  if (ec) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot create log directory '", path.parent_path().string(),
        "': ", ec.message(), "; check --log-dir"));
  }
  UniqueFd fd(
      open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (fd.get() < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot open log file '", path.string(),
                     "': ", ErrnoText(errno), "; check --log-dir"));
  }
  return fd;
}

namespace {

void EmitLine(Stream& s, absl::string_view text, bool newline,
              std::string& buf) {
  if (s.is_stderr && s.shared != nullptr) {
    absl::string_view t = absl::StripAsciiWhitespace(text);
    if (!t.empty()) {
      absl::MutexLock lock(&s.shared->mu);
      s.shared->procs[s.proc_index].last_stderr_line =
          std::string(t.substr(0, 1024));
    }
  }
  if (s.filtered != nullptr && s.filters != nullptr) {
    for (const std::string& f : *s.filters) {
      if (text.find(f) == absl::string_view::npos) continue;
      buf.assign(s.prefix);
      buf.append(text.data(), text.size());
      buf.push_back('\n');
      // One write per line from the one reader thread: lines never mix.
      if (!WriteAll(s.filtered->get(), buf.data(), buf.size())) {
        s.filtered.reset();
      }
      break;
    }
  }
  if (s.console_fd >= 0) {
    // One write() per line: lines of different workers never mix, and a piece
    // of an over-long line or a partial last line still ends the console line.
    buf.assign(s.prefix);
    buf.append(text.data(), text.size());
    buf.push_back('\n');
    if (!WriteAll(s.console_fd, buf.data(), buf.size())) {
      // A console that went away (closed pipe) must not stop the workers or the
      // files.
      s.console_fd = -1;
    }
  }
  if (s.file.get() >= 0 && !s.file_broken) {
    // Files keep the worker's bytes exactly: no prefix, and a '\n' only where
    // it wrote one.
    buf.assign(text.data(), text.size());
    if (newline) buf.push_back('\n');
    if (!WriteAll(s.file.get(), buf.data(), buf.size())) {
      MUSTER_LOG(ERROR) << "writing the log file " << s.file_name
                        << " failed: " << ErrnoText(errno)
                        << "; its further output is lost";
      s.file_broken = true;
    }
  }
}

}  // namespace

void ReaderLoop(std::shared_ptr<Shared> shared, std::vector<Stream> streams) {
  BlockSignalsInThisThread();
  std::string buf;
  std::vector<char> chunk(kMaxLine);
  auto emit_for = [&buf](Stream& s) {
    return [&buf, &s](absl::string_view text, bool newline) {
      EmitLine(s, text, newline, buf);
    };
  };
  auto finish = [&](Stream& s) {
    s.splitter.Flush(emit_for(s));
    s.fd.reset();
    s.file.reset();
  };
  // Reads what is in `s` now. Returns false at EOF or on an error.
  auto read_once = [&](Stream& s) {
    while (true) {
      const ssize_t n = read(s.fd.get(), chunk.data(), chunk.size());
      if (n > 0) {
        s.splitter.Feed(absl::string_view(chunk.data(), static_cast<size_t>(n)),
                        emit_for(s));
        return true;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
      return false;
    }
  };

  std::vector<pollfd> fds;
  std::vector<Stream*> polled;
  while (true) {
    fds.clear();
    polled.clear();
    fds.push_back({shared->reader_wake_fd, POLLIN, 0});
    for (Stream& s : streams) {
      if (s.fd.get() < 0) continue;
      fds.push_back({s.fd.get(), POLLIN, 0});
      polled.push_back(&s);
    }
    if (polled.empty()) break;
    if (shared->reader_quit.load()) {
      // Told to stop waiting for EOF (a grandchild holds a pipe): take what is
      // there, bounded, and end.
      for (Stream* s : polled) {
        for (int i = 0; i < 64; ++i) {
          pollfd p{s->fd.get(), POLLIN, 0};
          if (poll(&p, 1, 0) <= 0 || !read_once(*s)) break;
        }
        finish(*s);
      }
      break;
    }
    const int n = poll(fds.data(), fds.size(), -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      MUSTER_LOG(ERROR) << "poll on process output failed: "
                        << ErrnoText(errno);
      for (Stream* s : polled) finish(*s);
      break;
    }
    if (fds[0].revents != 0) {
      uint64_t v;
      ssize_t ignored = read(shared->reader_wake_fd, &v, sizeof(v));
      (void)ignored;
    }
    // One read per ready pipe per round: a chatty worker cannot starve the
    // others.
    for (size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      Stream& s = *polled[i - 1];
      if (!read_once(s)) finish(s);
    }
  }
  absl::MutexLock lock(&shared->mu);
  shared->reader_done = true;
}

}  // namespace muster::platform::posix
