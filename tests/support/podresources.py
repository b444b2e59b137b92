"""Pod-resources List responses as older kubelets send them: no share_id (before 1.35) and,
before 1.31, a class_name with only cdi_devices in each claim resource."""

from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory

NV = "gpu.nvidia.com"


def _old_kubelet_messages(with_driver_fields: bool):
    """The v1 messages as an older kubelet compiled them: no share_id (before 1.35), and before
    1.31 ``class_name = 1`` with only ``cdi_devices`` in ClaimResource."""
    f = descriptor_pb2.FileDescriptorProto(name="old_api.proto", package="v1", syntax="proto3")
    string, rep, msg = (descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
                        descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED,
                        descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE)
    opt = descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL

    def message(name, *fields):
        m = f.message_type.add(name=name)
        for number, fname, ftype, label, type_name in fields:
            m.field.add(name=fname, number=number, type=ftype, label=label,
                        type_name=type_name or None)

    message("CDIDevice", (1, "name", string, opt, ""))
    claim_fields = [(1, "cdi_devices", msg, rep, ".v1.CDIDevice")]
    if with_driver_fields:
        claim_fields += [(2, "driver_name", string, opt, ""), (3, "pool_name", string, opt, ""),
                         (4, "device_name", string, opt, "")]
    message("ClaimResource", *claim_fields)
    dynamic = [(2, "claim_name", string, opt, ""), (3, "claim_namespace", string, opt, ""),
               (4, "claim_resources", msg, rep, ".v1.ClaimResource")]
    if not with_driver_fields:
        dynamic.insert(0, (1, "class_name", string, opt, ""))
    message("DynamicResource", *dynamic)
    message("ContainerResources", (1, "name", string, opt, ""),
            (5, "dynamic_resources", msg, rep, ".v1.DynamicResource"))
    message("PodResources", (1, "name", string, opt, ""), (2, "namespace", string, opt, ""),
            (3, "containers", msg, rep, ".v1.ContainerResources"))
    message("ListPodResourcesResponse", (1, "pod_resources", msg, rep, ".v1.PodResources"))
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(
        "v1.ListPodResourcesResponse"))


def old_response(with_driver_fields):
    """Pod train-0's container holding claim ml/gpu, as an older kubelet encodes it."""
    cls = _old_kubelet_messages(with_driver_fields)
    resource = {"cdi_devices": [{"name": "k8s.gpu.nvidia.com/claim=u-gpu-0"}]}
    dynamic = {"claim_name": "gpu", "claim_namespace": "ml", "claim_resources": [resource]}
    if with_driver_fields:
        resource.update(driver_name=NV, pool_name="node-1", device_name="gpu-0")
    else:
        dynamic["class_name"] = "gpu.nvidia.com"
    return json_format.ParseDict({"pod_resources": [{"name": "train-0", "namespace": "ml",
                                                      "containers": [{"name": "main",
                                                                      "dynamic_resources": [
                                                                          dynamic]}]}]}, cls())
