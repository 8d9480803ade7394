// The JSON form of a GetStatus answer: what `muster status --json` prints and
// what musterd's console API (/api/v1/jobs) serves, so that the two never
// differ. Field names are the proto's (snake_case) and every field is present,
// zero or not.
#ifndef MUSTER_RENDEZVOUS_STATUS_JSON_H_
#define MUSTER_RENDEZVOUS_STATUS_JSON_H_

#include <string>

#include "google/protobuf/message.h"

namespace muster::rendezvous {

// Indented JSON of `message` (a v1::GetStatusResponse or one v1::JobStatus).
std::string StatusJson(const google::protobuf::Message& message);

}  // namespace muster::rendezvous

#endif  // MUSTER_RENDEZVOUS_STATUS_JSON_H_
