#!/usr/bin/env python3
"""Writes fixtures/reranker/length.onnx: a stand-in cross-encoder for rag's tests.

No reranker weights ship with rag (users bring their own, e.g. a bge or ms-marco
cross-encoder exported to ONNX), so the tests exercise the reranking code path with this
tiny graph. It has a real cross-encoder's interface (input_ids, attention_mask,
token_type_ids -> logits [batch, 1]) and scores a (question, passage) pair by its length in
tokens, so a test can predict the order it imposes. Needs `pip install onnx`.
"""
import pathlib

import onnx
from onnx import TensorProto, helper

ints = lambda name: helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "seq"])
graph = helper.make_graph(
    [
        helper.make_node("Cast", ["attention_mask"], ["mask_f"], to=TensorProto.FLOAT),
        helper.make_node("ReduceSum", ["mask_f", "axes"], ["logits"], keepdims=1),
        # token_type_ids is read so the session asks for it, as BERT cross-encoders do.
        helper.make_node("Shape", ["token_type_ids"], ["tt_shape"]),
    ],
    "length_reranker",
    [ints("input_ids"), ints("attention_mask"), ints("token_type_ids")],
    [
        helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 1]),
        helper.make_tensor_value_info("tt_shape", TensorProto.INT64, [2]),
    ],
    [helper.make_tensor("axes", TensorProto.INT64, [1], [1])],
)
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
model.ir_version = 8
onnx.checker.check_model(model)
out = pathlib.Path(__file__).resolve().parents[2] / "fixtures/reranker/length.onnx"
out.write_bytes(model.SerializeToString())
print(f"wrote {out} ({out.stat().st_size} bytes)")
