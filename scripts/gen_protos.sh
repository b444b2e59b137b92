#!/usr/bin/env bash
# Regenerates the committed gRPC/protobuf modules from the .proto files beside them.
# Needs grpcio-tools (the test extra installs it). Each .proto has its own file name because
# protobuf's descriptor pool is keyed by it; generated imports are made package-relative.
set -euo pipefail
cd "$(dirname "$0")/.."
for proto in gpustats/sources/podresources/podresources_api.proto \
             gpustats/sources/runtime/cri_api.proto \
             gpustats/deviceapi/nvsentinel_gpu.proto; do
    dir=$(dirname "$proto")
    name=$(basename "$proto" .proto)
    python -m grpc_tools.protoc -I"$dir" --python_out="$dir" --grpc_python_out="$dir" \
        --pyi_out="$dir" "$proto"
    sed -i "s/^import ${name}_pb2 as /from . import ${name}_pb2 as /" "$dir/${name}_pb2_grpc.py"
done
