"""muster's protocol, generated at build time from proto/muster/v1/*.proto
(store_pb2.py, store_pb2_grpc.py: python/CMakeLists.txt)."""
