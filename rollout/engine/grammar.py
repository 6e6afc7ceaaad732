"""Grammar-constrained decoding with xgrammar: compiling a request's grammar and following it
token by token (`constrained_sampling` draws the tokens it allows).

A request gives at most one of SGLang's `json_schema`, `regex`, `ebnf`, or roost's `choice`
(compiled as the regex `choice_regex` makes). The grammar changes only which token is drawn: the
scheduler takes the logprobs from the raw logits, so a constrained call records the model's own
distribution, as an unconstrained one does. As in SGLang, a request ends when its
grammar does (the model's end-of-sequence token is the grammar's last), even with `ignore_eos`.

xgrammar is imported on the first constrained request: an engine that never sees one does not
pay for it.
"""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from roost.rollout.engine_api.wire import RequestError, choice_regex

if TYPE_CHECKING:
    import xgrammar

BACKEND = "xgrammar"
ANY_JSON = "$$ANY$$"  # SGLang's json_schema for any JSON value (what it sends for json_object)
COMPILED_CACHE_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True)
class Grammar:
    """A request's grammar, compiled (xgrammar hands every request with the same source the same
    compiled form)."""

    kind: str
    """The sampling field it came from: json_schema, regex, ebnf or choice."""
    compiled: xgrammar.CompiledGrammar

    def matcher(self) -> GrammarState:
        import xgrammar

        return GrammarState(self.kind, xgrammar.GrammarMatcher(self.compiled))

    def accepts(self, ids: list[int]) -> bool:
        """Whether `ids` (ending with the end-of-sequence token) is a whole reply of this grammar."""
        state = self.matcher()
        return all(state.matcher.accept_token(t) for t in ids) and state.matcher.is_terminated()

    def meta(self) -> dict[str, Any]:
        """What an answer's meta_info says about the constraint."""
        return {"type": self.kind, "backend": BACKEND}


@dataclass
class GrammarState:
    """One request's place in its grammar (engine thread only)."""

    kind: str
    matcher: xgrammar.GrammarMatcher

    def advance(self, token: int) -> dict[str, Any] | None:
        """Take in a sampled token; the finish reason when the grammar ended (or broke), else None."""
        if not self.matcher.accept_token(token):
            # the mask allows only accepted tokens, so this is a bug of the mask or of a forced reply
            return {"type": "abort", "message": f"token {token} does not continue the request's {self.kind}"}
        if self.matcher.is_terminated():
            return {"type": "stop", "matched": token}
        return None


class Grammars:
    """Compiles requests' grammars for one model's vocabulary, with xgrammar's compiler, which
    caches each compiled grammar by its source (up to COMPILED_CACHE_BYTES)."""

    def __init__(self, tokenizer: Any, vocab_size: int, stop_token_ids: list[int]):
        self._tokenizer = tokenizer
        self._vocab_size = vocab_size
        self._stop_token_ids = stop_token_ids
        self._compiler: xgrammar.GrammarCompiler | None = None
        self._lock = asyncio.Lock()

    async def compile(self, field: str, value: str | list[str]) -> Grammar:
        """Compile a request's grammar off the event loop; a RequestError names the field and
        xgrammar's reason when it is invalid."""
        compiler = await self._ready_compiler()
        try:
            compiled = await asyncio.to_thread(compile_grammar, compiler, field, value)
        except (RuntimeError, ValueError) as exc:
            raise RequestError(f"sampling_params.{field} is invalid: {_reason(exc)}") from exc
        return Grammar(field, compiled)

    async def _ready_compiler(self) -> xgrammar.GrammarCompiler:
        # reading the vocabulary takes seconds for a 150k-token tokenizer: once, on first use
        async with self._lock:
            if self._compiler is None:
                self._compiler = await asyncio.to_thread(self._new_compiler)
        return self._compiler

    def _new_compiler(self) -> xgrammar.GrammarCompiler:
        return new_compiler(self._tokenizer, self._vocab_size, self._stop_token_ids)


def new_compiler(tokenizer: Any, vocab_size: int, stop_token_ids: list[int]) -> xgrammar.GrammarCompiler:
    """xgrammar's compiler for one model's vocabulary (the engine's, and the trainer's when it
    replays a call's grammar)."""
    try:
        import xgrammar
    except ImportError as exc:
        raise RequestError(
            "json_schema, regex, ebnf and choice need the grammar library xgrammar, which is not installed "
            "here: pip install 'roost[grammar]'"
        ) from exc
    info = xgrammar.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size, stop_token_ids=stop_token_ids)
    return xgrammar.GrammarCompiler(info, cache_limit_bytes=COMPILED_CACHE_BYTES)


def compile_grammar(compiler: xgrammar.GrammarCompiler, field: str, value: str | list[str]) -> xgrammar.CompiledGrammar:
    """The grammar of a request's constraint field (`SamplingParams.constraint`)."""
    if field == "json_schema":
        # json.dumps's layout, no free whitespace (SGLang's --constrained-json-disable-any-whitespace):
        # with it, the tiny model padded every reply with whitespace up to its token limit
        schema = "{}" if value == ANY_JSON else bounded_strings_as_patterns(value)
        return compiler.compile_json_schema(schema, any_whitespace=False)
    if field == "regex":
        return compiler.compile_regex(value)
    if field == "ebnf":
        return compiler.compile_grammar(value)
    return compiler.compile_regex(choice_regex(list(value)))


def bounded_strings_as_patterns(schema: str) -> str:
    """`schema` with each string's `minLength`/`maxLength` said as a `pattern` of the same bounds
    over characters that need no escape. xgrammar 0.2.9 compiles a length-bounded string to the
    class `[^"\\\r\n]`, which lets control characters through unescaped: the tiny model wrote
    `"//\x05ości"`, which no strict JSON parser reads. Its unbounded strings and its patterns
    exclude them. A string that already has a pattern, format, enum or const is left as it is."""
    try:
        tree = json.loads(schema)
    except ValueError:
        return schema  # xgrammar's compile says what is wrong with it
    return json.dumps(_with_patterns(tree))


def _with_patterns(node: Any) -> Any:
    if isinstance(node, list):
        return [_with_patterns(item) for item in node]
    if not isinstance(node, dict):
        return node
    node = {key: _with_patterns(value) for key, value in node.items()}
    bounded = "minLength" in node or "maxLength" in node
    if node.get("type") == "string" and bounded and not {"pattern", "format", "enum", "const"} & node.keys():
        low, high = node.pop("minLength", 0), node.pop("maxLength", "")
        node["pattern"] = f'^[^\\x00-\\x1f"\\\\]{{{low},{high}}}$'
    return node


def _reason(exc: Exception) -> str:
    """xgrammar's message without its C++ log prefix ("[09:41:45] /project/cpp/x.cc:94: ")."""
    text = str(exc).strip()
    return re.sub(r"^\[[\d:]+\] \S+:\d+: ", "", text).replace("Check failed: (error.empty()) is false: ", "")
