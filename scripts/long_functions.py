#!/usr/bin/env python3
"""Lists the functions longer than 150 lines and the files longer than 800 in muster's C++ sources.

  python3 scripts/long_functions.py              # the product modules (not tests/)
  python3 scripts/long_functions.py --tests      # tests/ too
  python3 scripts/long_functions.py PATH...      # just these files or folders
  python3 scripts/long_functions.py --max-function 100 --max-file 600

Prints one line per finding ("file:line: Name: N lines (function)") and exits with 1 when there
is one, 0 when there is none. A function is a brace-delimited body whose header has a parameter
list and is not a control statement, class, namespace or initializer; lambdas and local classes
count towards the function around them; a function that only returns a braced list (a table) is
data, not logic, and is left out. Comments, literals and preprocessor lines are skipped.
It is a heuristic, not a C++ parser: a finding is worth a look, not a proof.
"""
import argparse
import os
import re
import sys

MODULES = ["agent", "bench", "cli", "comm", "common", "doctor", "examples", "platform",
           "rendezvous"]
EXTENSIONS = (".cc", ".h", ".c", ".cpp", ".hpp")
NOT_FUNCTIONS = re.compile(
    r"^(namespace|class|struct|union|enum|extern|if|for|while|switch|do|else|try|catch|"
    r"return|case|default)\b")


def strip_code(text):
    """The text with comments and literals blanked out (newlines kept, so lines still count)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif c == 'R' and text.startswith('R"', i) and (i == 0 or not text[i - 1].isalnum()):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            if not m:
                out.append(c)
                i += 1
                continue
            end = ")" + m.group(1) + '"'
            j = text.find(end, i + m.end())
            j = n if j < 0 else j + len(end)
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            # A digit separator (1'000) is not a character literal.
            if c == "'" and i > 0 and text[i - 1].isalnum() and j < n and text[j] != c:
                out.append(c)
                i += 1
                continue
            out.append(c + c)
            i = min(j + 1, n)
        else:
            out.append(c)
            i += 1
    return "".join(out)


def strip_preprocessor(code):
    """`code` with preprocessor lines (and their continuations) blanked out."""
    out = []
    continued = False
    for line in code.split("\n"):
        directive = continued or line.lstrip().startswith("#")
        continued = directive and line.rstrip().endswith("\\")
        out.append("" if directive else line)
    return "\n".join(out)


def functions(text):
    """(name, first line, line count) of each outermost function body in `text`; a body that
    only returns a braced list (a table: data, not logic) is left out."""
    code = strip_preprocessor(strip_code(text))
    found = []
    header_start = 0   # where the text before the next '{' at this level begins
    stack = []         # per open brace: True when it opens a function body
    in_function = 0    # how many function bodies are open (nested ones count as one)
    start_line = {}
    line = 1
    for i, c in enumerate(code):
        if c == "\n":
            line += 1
        elif c == ";":
            header_start = i + 1
        elif c == "{":
            header = " ".join(code[header_start:i].split())
            is_function = False
            if in_function == 0 and "(" in header and ")" in header:
                head = header.lstrip()
                # A header ends its parameter list with ')' and may carry qualifiers, an
                # initializer list or a trailing return type; '=' before the '(' is an initializer.
                before_paren = head[:head.find("(")]
                if not NOT_FUNCTIONS.match(head) and "=" not in before_paren:
                    is_function = True
            stack.append(is_function)
            if is_function:
                in_function += 1
                words = header[:header.find("(")].split()
                name = words[-1] if words else "(anonymous)"
                start_line[len(stack)] = (name, line, i + 1)
            header_start = i + 1
        elif c == "}":
            if stack:
                depth = len(stack)
                if stack.pop():
                    in_function -= 1
                    name, first, body_start = start_line.pop(depth)
                    if not re.match(r"\s*return\s*\{", code[body_start:i]):
                        found.append((name, first, line - first + 1))
            header_start = i + 1
    return found


def source_files(paths):
    for path in paths:
        if os.path.isfile(path):
            yield path
            continue
        for root, dirs, files in os.walk(path):
            dirs[:] = sorted(d for d in dirs if not d.startswith((".", "build")))
            for f in sorted(files):
                if f.endswith(EXTENSIONS):
                    yield os.path.join(root, f)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("paths", nargs="*", help="files or folders (default: the modules)")
    parser.add_argument("--tests", action="store_true", help="tests/ too")
    parser.add_argument("--max-function", type=int, default=150)
    parser.add_argument("--max-file", type=int, default=800)
    args = parser.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    paths = args.paths or [os.path.join(root, m) for m in MODULES + (["tests"] if args.tests else [])]
    findings = 0
    for path in source_files(paths):
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        rel = os.path.relpath(path, root)
        lines = text.count("\n")
        if lines > args.max_file:
            print(f"{rel}: {lines} lines (file)")
            findings += 1
        for name, first, count in functions(text):
            if count > args.max_function:
                print(f"{rel}:{first}: {name}: {count} lines (function)")
                findings += 1
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
