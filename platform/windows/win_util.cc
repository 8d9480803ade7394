#include "platform/windows/win_util.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace muster::platform::windows {

std::wstring Widen(absl::string_view utf8) {
  if (utf8.empty()) return {};
  const int n = MultiByteToWideChar(CP_UTF8, 0, utf8.data(),
                                    static_cast<int>(utf8.size()), nullptr, 0);
  std::wstring out(static_cast<size_t>(n), L'\0');
  MultiByteToWideChar(CP_UTF8, 0, utf8.data(), static_cast<int>(utf8.size()),
                      out.data(), n);
  return out;
}

std::string Narrow(std::wstring_view utf16) {
  if (utf16.empty()) return {};
  const int n = WideCharToMultiByte(CP_UTF8, 0, utf16.data(),
                                    static_cast<int>(utf16.size()), nullptr, 0,
                                    nullptr, nullptr);
  std::string out(static_cast<size_t>(n), '\0');
  WideCharToMultiByte(CP_UTF8, 0, utf16.data(), static_cast<int>(utf16.size()),
                      out.data(), n, nullptr, nullptr);
  return out;
}

std::string ErrorText(DWORD error) {
  wchar_t* buf = nullptr;
  const DWORD n = FormatMessageW(
      FORMAT_MESSAGE_ALLOCATE_BUFFER | FORMAT_MESSAGE_FROM_SYSTEM |
          FORMAT_MESSAGE_IGNORE_INSERTS,
      nullptr, error, MAKELANGID(LANG_NEUTRAL, SUBLANG_DEFAULT),
      reinterpret_cast<wchar_t*>(&buf), 0, nullptr);
  std::string text;
  if (n > 0 && buf != nullptr) {
    text = std::string(
        absl::StripAsciiWhitespace(Narrow(std::wstring_view(buf, n))));
  }
  if (buf != nullptr) LocalFree(buf);
  if (text.empty()) return absl::StrCat("error ", error);
  return absl::StrCat(text, " (error ", error, ")");
}

std::string LastErrorText() { return ErrorText(GetLastError()); }

bool WriteAll(HANDLE h, absl::string_view data) {
  while (!data.empty()) {
    DWORD written = 0;
    const DWORD n = static_cast<DWORD>(std::min<size_t>(data.size(), 1 << 24));
    if (!WriteFile(h, data.data(), n, &written, nullptr) || written == 0) {
      return false;
    }
    data.remove_prefix(written);
  }
  return true;
}

std::wstring QuoteArgument(std::wstring_view arg) {
  if (!arg.empty() &&
      arg.find_first_of(L" \t\n\v\"") == std::wstring_view::npos) {
    return std::wstring(arg);
  }
  std::wstring out = L"\"";
  size_t backslashes = 0;
  for (wchar_t c : arg) {
    if (c == L'\\') {
      ++backslashes;
      continue;
    }
    if (c == L'"') {
      // 2n+1 backslashes then the quote: n literal backslashes and a '"'.
      out.append(2 * backslashes + 1, L'\\');
    } else {
      // Backslashes not before a quote are literal.
      out.append(backslashes, L'\\');
    }
    backslashes = 0;
    out.push_back(c);
  }
  // Before the closing quote, backslashes are doubled so it stays a quote.
  out.append(2 * backslashes, L'\\');
  out.push_back(L'"');
  return out;
}

std::wstring BuildCommandLine(const std::vector<std::string>& argv) {
  std::wstring line;
  for (size_t i = 0; i < argv.size(); ++i) {
    if (i > 0) line.push_back(L' ');
    line += QuoteArgument(Widen(argv[i]));
  }
  return line;
}

std::wstring EnvironmentBlock(const std::map<std::string, std::string>& env) {
  std::vector<std::wstring> entries;
  entries.reserve(env.size());
  for (const auto& [name, value] : env) {
    if (name.empty() || name.find('=') != std::string::npos) continue;
    entries.push_back(Widen(absl::StrCat(name, "=", value)));
  }
  // Windows wants the block sorted by name, case-insensitively (Unicode
  // order, no locale).
  auto key = [](const std::wstring& e) {
    std::wstring k = e.substr(0, e.find(L'='));
    for (wchar_t& c : k) c = static_cast<wchar_t>(towupper(c));
    return k;
  };
  std::sort(entries.begin(), entries.end(),
            [&key](const std::wstring& a, const std::wstring& b) {
              return key(a) < key(b);
            });
  std::wstring block;
  for (const std::wstring& e : entries) {
    block += e;
    block.push_back(L'\0');
  }
  if (block.empty()) block.push_back(L'\0');
  block.push_back(L'\0');
  return block;
}

}  // namespace muster::platform::windows
