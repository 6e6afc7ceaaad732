"""The protobuf bodies the SDK sends to `forward_backward` (zstd-compressed when the server's
client config asks for it), and the `ForwardBackwardOutput` and `SampleResponse` it expects back.

The schema is the SDK's own (`tinker.proto.tinker_public_pb2`), so both ends agree by construction.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


class BodyError(ValueError):
    """A request body that does not decode; the message says what was expected."""


@dataclass
class Datum:
    """One training example: the input tokens and the loss function's per-token inputs."""

    tokens: list[int]
    inputs: dict[str, np.ndarray]


@dataclass
class ForwardBackwardCall:
    model_id: str
    seq_id: int
    loss_fn: str
    forward_only: bool
    data: list[Datum]
    loss_fn_config: dict[str, float] = field(default_factory=dict)


def _pb():
    from tinker.proto import tinker_public_pb2

    return tinker_public_pb2


def decompress(body: bytes, encoding: str | None) -> bytes:
    if not encoding or encoding == "identity":
        return body
    if encoding != "zstd":
        raise BodyError(f"Content-Encoding {encoding!r} is not supported; send the body plain or zstd-compressed")
    import zstandard

    try:
        return zstandard.ZstdDecompressor().decompressobj().decompress(body)
    except zstandard.ZstdError as exc:
        raise BodyError(f"the body is not valid zstd ({exc}); compress it with zstd or send it plain") from None


def _tensor(message, name: str) -> np.ndarray:
    pb = _pb()
    dtypes = {pb.DTYPE_FLOAT32: np.float32, pb.DTYPE_INT64: np.int64}
    if message.dtype not in dtypes:
        raise BodyError(f"loss_fn_inputs[{name!r}] has dtype {message.dtype}; expected float32 or int64")
    if message.HasField("sparse_csr"):
        raise BodyError(f"loss_fn_inputs[{name!r}] is sparse; this server takes dense tensors only")
    values = np.frombuffer(message.dense, dtype=dtypes[message.dtype])
    shape = list(message.shape)
    if shape and int(np.prod(shape)) != values.size:
        raise BodyError(f"loss_fn_inputs[{name!r}] has {values.size} values for shape {shape}")
    return values.reshape(shape) if shape else values


def _datum(message, index: int) -> Datum:
    tokens: list[int] = []
    for chunk in message.model_input:
        if chunk.WhichOneof("chunk") != "encoded_text":
            raise BodyError(
                f"datum {index} has a {chunk.WhichOneof('chunk')} chunk; this server takes token chunks only"
            )
        tokens.extend(np.frombuffer(chunk.encoded_text.tokens, dtype=np.int32).tolist())
    return Datum(tokens, {name: _tensor(value, name) for name, value in message.loss_fn_inputs.items()})


def decode_forward_backward(body: bytes) -> ForwardBackwardCall:
    """A `ForwardBackwardRequest` protobuf, decoded; `BodyError` if it is not one."""
    from google.protobuf.message import DecodeError

    message = _pb().ForwardBackwardRequest()
    try:
        message.ParseFromString(body)
    except DecodeError as exc:
        raise BodyError(f"the body is not a ForwardBackwardRequest protobuf ({exc})") from None
    if not message.model_id:
        raise BodyError("the ForwardBackwardRequest names no model_id; send the id create_model returned")
    config = {key: value.number for key, value in message.loss_fn_config_v2.items() if value.HasField("number")}
    return ForwardBackwardCall(
        model_id=message.model_id,
        seq_id=message.seq_id,
        loss_fn=message.loss_fn,
        forward_only=message.forward_only,
        data=[_datum(d, i) for i, d in enumerate(message.data)],
        loss_fn_config=config or dict(message.loss_fn_config),
    )


def encode_forward_backward_output(outputs: list[dict[str, np.ndarray]], metrics: dict[str, float]) -> bytes:
    """A `ForwardBackwardOutput` protobuf: one record of float32 per-token fields, datums in order."""
    pb = _pb()
    message = pb.ForwardBackwardOutput(loss_fn_output_type="ArrayRecord", metrics=metrics)
    record = message.loss_fn_outputs.add()
    record.num_datums = len(outputs)
    for name in outputs[0] if outputs else []:
        arrays = [np.ascontiguousarray(out[name], dtype=np.float32).reshape(-1) for out in outputs]
        offsets = np.cumsum([0] + [a.nbytes for a in arrays], dtype=np.int64)
        batched = record.fields[name]
        batched.data = b"".join(a.tobytes() for a in arrays)
        batched.offsets = offsets.tobytes()
        batched.dtype = pb.DTYPE_FLOAT32
    return message.SerializeToString()


def encode_sample_response(sequences, prompt) -> bytes:
    """A `SampleResponse` protobuf: each sequence's tokens (int32), logprobs (float32) and stop
    reason; of the prompt (`sampling.PromptScores`, when asked for) its logprobs (NaN where there
    is none) and its top-k (row-major [length, k] ids and logprobs)."""
    pb = _pb()
    reasons = {"stop": pb.STOP_REASON_STOP, "length": pb.STOP_REASON_LENGTH}
    message = pb.SampleResponse()
    for sequence in sequences:
        item = message.sequences.add()
        item.tokens = np.asarray(sequence.tokens, dtype=np.int32).tobytes()
        item.logprobs = np.asarray(sequence.logprobs, dtype=np.float32).tobytes()
        item.stop_reason = reasons[sequence.stop_reason]
    if prompt is not None and prompt.logprobs is not None:
        message.prompt_logprobs = np.asarray(prompt.logprobs, dtype=np.float32).tobytes()
    if prompt is not None and prompt.topk is not None:
        ids, logprobs = prompt.topk
        topk = message.topk_prompt_logprobs
        topk.token_ids, topk.logprobs = ids.astype(np.int32).tobytes(), logprobs.astype(np.float32).tobytes()
        topk.length, topk.k = ids.shape
    return message.SerializeToString()
