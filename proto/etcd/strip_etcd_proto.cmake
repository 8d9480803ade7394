# Copies one of etcd's v3 API .proto files (Debian's golang-etcd-server-dev) to OUT without what
# C++ does not need and Debian 12 does not ship where protoc finds it: the imports of
# gogoproto/gogo.proto and google/api/annotations.proto, every `option (gogoproto.*) = ...;`
# line, every `[(gogoproto.*) = ...]` field option and every `option (google.api.http) = {...};`
# block. The messages and services are untouched, so the generated code speaks etcd's wire format.
#   cmake -DIN=<file> -DOUT=<file> -P strip_etcd_proto.cmake
file(READ "${IN}" text)
string(REGEX REPLACE "import \"gogoproto/gogo.proto\";" "" text "${text}")
string(REGEX REPLACE "import \"google/api/annotations.proto\";" "" text "${text}")
string(REGEX REPLACE "option \\(gogoproto\\.[A-Za-z_]+\\) = [A-Za-z0-9_\"]+;" "" text "${text}")
# Field options: a list of one or more gogoproto options in brackets.
string(REGEX REPLACE " *\\[\\(gogoproto\\.[^]]*\\]" "" text "${text}")
# One level of nested braces (additional_bindings { ... }) occurs.
string(REGEX REPLACE "option \\(google\\.api\\.http\\) = {[^{}]*({[^{}]*}[^{}]*)*};" "" text "${text}")
if(text MATCHES "gogoproto|google\\.api")
  message(FATAL_ERROR "${IN}: gogoproto or google.api options are left after stripping; "
                      "the etcd .proto files changed: update proto/etcd/strip_etcd_proto.cmake")
endif()
file(WRITE "${OUT}.tmp" "${text}")
file(RENAME "${OUT}.tmp" "${OUT}")
