#!/usr/bin/env bash
# muster_comm.dll's tables (ctest muster_comm_dll_tables_test, run natively: objdump reads PE):
#   - it exports exactly the functions c_api.h marks MUSTER_COMM_API (no C++ symbol leaks out:
#     one explicit dllexport turns MinGW's export-everything off);
#   - it imports only Windows' own DLLs (libmuster_comm, gRPC, Gloo, libuv, the C++ runtime and
#     zlib are linked in statically), so shipping muster_comm.dll alone is enough;
#   - the import library resolves the C API to the DLL, and win_c_api_test.exe, linked against
#     it, imports muster_comm.dll (so win_c_api_test really ran through the DLL).
# Usage: dll_tables_test.sh OBJDUMP DLL IMPORT_LIB EXE C_API_H
set -euo pipefail
objdump=$1 dll=$2 implib=$3 exe=$4 header=$5
fail() { echo "dll_tables_test: FAIL: $*" >&2; exit 1; }

dump=$("$objdump" -p "$dll")
exports=$(sed -n '/\[Ordinal\/Name Pointer\] Table/,/^$/p' <<<"$dump" |
  sed -n 's/^[[:space:]]*\[ *[0-9]*\] //p' | sort)
declared=$(tr '\n' ' ' <"$header" |
  grep -o 'MUSTER_COMM_API [^(]*(' | grep -o 'muster_[a-z0-9_]*(' | tr -d '(' | sort)
[[ -n $declared ]] || fail "no MUSTER_COMM_API function found in $header"
if [[ $exports != "$declared" ]]; then
  diff <(echo "$declared") <(echo "$exports") >&2 || true
  fail "$dll exports differ from c_api.h's MUSTER_COMM_API functions (< header, > DLL)"
fi
echo "exports: $(wc -l <<<"$exports") functions, exactly c_api.h's"

allowed='^(kernel32|advapi32|bcrypt|crypt32|dbghelp|iphlpapi|msvcrt|ntdll|rstrtmgr|user32|userenv|ws2_32|ole32|psapi|shell32|api-ms-win-.*)\.dll$'
imports=$(sed -n 's/^[[:space:]]*DLL Name: //p' <<<"$dump" | tr 'A-Z' 'a-z' | sort -u)
[[ -n $imports ]] || fail "no import table in $dll"
bad=$(grep -Ev "$allowed" <<<"$imports" || true)
[[ -z $bad ]] || fail "$dll needs DLLs that are not Windows' own: $bad"
echo "imports: $(tr '\n' ' ' <<<"$imports")"

nm=${objdump%objdump}nm
grep -q ' __imp_muster_comm_init$' <<<"$("$nm" "$implib")" ||
  fail "$implib has no __imp_muster_comm_init"
grep -qi 'DLL Name: muster_comm.dll' <<<"$("$objdump" -p "$exe")" ||
  fail "$exe does not import muster_comm.dll"
echo "dll_tables_test: OK"
