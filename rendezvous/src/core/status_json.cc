#include "muster/rendezvous/status_json.h"

#include "google/protobuf/util/json_util.h"

namespace muster::rendezvous {

std::string StatusJson(const google::protobuf::Message& message) {
  std::string text;
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.always_print_primitive_fields = true;
  options.preserve_proto_field_names = true;
  // Fails only for messages with Any fields of unknown types; status has none.
  (void)google::protobuf::util::MessageToJsonString(message, &text, options);
  return text;
}

}  // namespace muster::rendezvous
