"""`roost preflight`: does this model's chat template let the gateway extend prompts exactly?

For the model's chat template and tool-call format, scripted multi-turn conversations
(plain replies, tool calls and results, parallel calls, reasoning, thinking disabled) are
recorded turn by turn through the gateway's recorder (`core/transcripts.py`: the prompt planned
on the agent's token tree and the call added to it, as the call pipeline does), with replies in
the model's own output format. Each turn reports
whether the template re-renders the previous prompt plus the sampled reply exactly, and
where it does not, what the gateway does under each reasoning policy. It also checks that
the tool-call parser recovers every call from the model's own format, that
tokenizing by segments equals tokenizing whole texts, and that control-token spellings in
message content are tokenized as the text they are.

Every scenario is played on each wire (chat, Anthropic Messages, OpenAI Responses): the
conversation is sent as that wire's request and read back by the wire's own parser
(wire_roundtrip.py), and a turn that forks on a wire where chat extends is a problem.
Responses cannot pass template arguments, so it skips the thinking-disabled scenario.
"""

from __future__ import annotations

from array import array
from dataclasses import asdict, dataclass, field
from typing import Any

from roost.rollout.chat.reply_parser import HERMES, ReplyFormat, ReplyParser
from roost.rollout.chat.tokenizer import ChatTokenizer
from roost.rollout.gateway.anthropic.messages import ThinkingSigner
from roost.rollout.gateway.core.prompt_builder import POLICIES, PromptBuilder
from roost.rollout.gateway.core.recording import Sampled, build_reply
from roost.rollout.gateway.core.transcripts import TranscriptRecorder
from roost.rollout.gateway.wire_roundtrip import WireRoundTrip, via_chat, wires

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search the web",
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
        },
    },
]
"""Two tool schemas (a weather lookup, a web search): preflight's tool-call checks, also used by
the gateway benchmark and the gateway tests."""


@dataclass
class Step:
    new: list[dict[str, Any]]  # messages the harness adds before this call (tool results get ids filled in)
    reply: str  # what the model samples, in its own format
    calls: int = 0  # tool calls the parser must find in it


def _scenarios(fmt: ReplyFormat) -> dict[str, tuple[list[Step], dict[str, Any] | None]]:
    weather = fmt.format_call("get_weather", '{"city": "Paris"}')
    search = fmt.format_call("search", '{"q": "Paris museums"}')
    think = "<think>\nThe user wants {}. Let me think it through.\n</think>\n\n"
    system = {"role": "system", "content": "You are a helpful assistant."}
    return {
        "plain multi-turn": (
            [
                Step([system, {"role": "user", "content": "Hi!"}], "Hello! How can I help?"),
                Step([{"role": "user", "content": "Tell me a joke."}], "Why did the chicken cross the road?"),
                Step([{"role": "user", "content": "Another."}], "I am out of jokes."),
            ],
            None,
        ),
        "tool call and result": (
            [
                Step([system, {"role": "user", "content": "Weather in Paris?"}], weather, 1),
                Step([{"role": "tool", "content": "sunny, 21C"}], "It is sunny and 21C in Paris."),
                Step([{"role": "user", "content": "Museums there?"}], "Let me look.\n" + search, 1),
                Step([{"role": "tool", "content": "Louvre, Orsay"}], "The Louvre and the Musée d'Orsay."),
            ],
            None,
        ),
        "parallel tool calls": (
            [
                Step(
                    [system, {"role": "user", "content": "Weather and museums in Paris?"}], weather + "\n" + search, 2
                ),
                Step(
                    [{"role": "tool", "content": "sunny"}, {"role": "tool", "content": "Louvre"}],
                    "Sunny; visit the Louvre.",
                ),
                Step([{"role": "user", "content": "Thanks"}], "You're welcome."),
            ],
            None,
        ),
        "reasoning, plain replies": (
            [
                Step([system, {"role": "user", "content": "What is 2+2?"}], think.format("a sum") + "4."),
                Step([{"role": "user", "content": "And 3+3?"}], think.format("another sum") + "6."),
                Step([{"role": "user", "content": "Thanks"}], think.format("to close") + "Any time."),
            ],
            None,
        ),
        "reasoning with tool calls": (
            [
                Step([system, {"role": "user", "content": "Weather in Paris?"}], think.format("weather") + weather, 1),
                Step([{"role": "tool", "content": "sunny, 21C"}], think.format("an answer") + "Sunny, 21C."),
                Step([{"role": "user", "content": "Museums?"}], think.format("museums") + search, 1),
                Step([{"role": "tool", "content": "Louvre"}], think.format("an answer") + "The Louvre."),
            ],
            None,
        ),
        "thinking disabled": (
            [
                Step([system, {"role": "user", "content": "Hi"}], "Hello."),
                Step([{"role": "user", "content": "Weather in Paris?"}], weather, 1),
                Step([{"role": "tool", "content": "sunny"}], "Sunny."),
            ],
            {"enable_thinking": False},
        ),
    }


@dataclass
class TurnCheck:
    wire: str
    scenario: str
    turn: int
    exact: bool
    detail: str | None
    keep: str
    drop: str
    retokenizes_equal: bool  # policy drop: the prompt ids equal tokenizing the rendered prompt whole


@dataclass
class PreflightReport:
    model: str
    segmented_tokenization: bool
    control_text_as_text: bool = False  # control-token spellings in content are tokenized as text
    checks: list[TurnCheck] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def as_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "ok": self.ok,
            "segmented_tokenization": self.segmented_tokenization,
            "control_text_as_text": self.control_text_as_text,
            "turns": [asdict(c) for c in self.checks],
            "problems": self.problems,
        }


def _action(plan, policy: str) -> str:
    if plan.kind == "root":
        return "first call: prompt tokenized whole"
    if plan.kind == "extend" and plan.reuse == "exact":
        return f"extends: reuses {plan.shared_prefix_len} tokens, tokenizes only the new messages"
    if plan.kind == "extend":
        return (
            f"keeps the sampled reply: reuses {plan.shared_prefix_len} tokens as the engine saw them "
            "(prompt differs from the template's own rendering)"
        )
    return (
        f"forks: the template's rendering shares {plan.shared_prefix_len} of the previous path's "
        f"{plan.parent.path_len if plan.parent else 0} tokens; a new branch is recorded"
    )


def _play(
    name: str,
    steps: list[Step],
    template_kwargs: dict | None,
    policy: str,
    builder: PromptBuilder,
    tokenizer: ChatTokenizer,
    fmt: ReplyFormat,
    problems: list[str],
    wire: WireRoundTrip,
) -> list[tuple[Any, bool]]:
    recorder = TranscriptRecorder(builder, policy)
    messages: list[dict[str, Any]] = []
    last_ids: list[str] = []
    out = []
    for turn, step in enumerate(steps):
        pending = list(last_ids)
        for m in step.new:
            m = dict(m)
            if m["role"] == "tool" and pending:
                m["tool_call_id"] = pending.pop(0)
            messages.append(m)
        plan, chain_end, rendered = recorder.plan(wire(messages, TOOLS, template_kwargs))
        whole = tokenizer.encode_whole(rendered)
        out.append((plan, list(plan.prompt_ids) == whole))
        sampled = Sampled(array("i", tokenizer.encode(step.reply) + [tokenizer.eos_id]), array("d"), {"type": "stop"})
        parser = ReplyParser(fmt, parse_tools=True)
        events = parser.feed(step.reply) + parser.finish()
        last_ids = [f"call_{turn}_{i}" for i, e in enumerate(events) if e.kind == "tool_call"]
        reply, message, reply_key = build_reply(events, last_ids, chain_end)
        if policy == POLICIES[0] and (len(reply.tool_calls) != step.calls or reply.failures):
            problems.append(
                f"{name}, turn {turn + 1}: the tool-call parser found {len(reply.tool_calls)} of "
                f"{step.calls} calls in the model's own format ({reply.failures or 'no failure'})"
            )
        recorder.record(f"c{turn}", plan, sampled, reply_key)
        messages.append({k: v for k, v in message.items() if v is not None})
    return out


def _control_text_problem(builder: PromptBuilder, tokenizer: ChatTokenizer) -> str | None:
    """Why a user message and a tool result spelling every added token would not reach the
    model as that text (None: they do): the prompt must hold the control tokens of the same
    conversation with plain content, and no others, and decode to the content verbatim."""
    spelled = "see " + " and ".join(tokenizer.added_ids)

    def prompt(content: str) -> list[int]:
        conversation = [
            {"role": "user", "content": content},
            {"role": "assistant", "content": "ok"},
            {"role": "tool", "content": content},
        ]
        plan, _, _ = TranscriptRecorder(builder, POLICIES[0]).plan(via_chat(conversation, [], None))
        return plan.prompt_ids.tolist()

    added = set(tokenizer.added_ids.values())
    ids, plain = prompt(spelled), prompt("see")
    if [t for t in ids if t in added] != [t for t in plain if t in added]:
        return "control-token spellings in message content are tokenized as control tokens"
    if tokenizer.decode(ids).count(spelled) != 2:
        return "message content spelling control tokens does not decode back to its text"
    return None


def run_preflight(model: str = "tiny", fmt: ReplyFormat = HERMES) -> PreflightReport:
    from roost.rollout.engine.tiny_model import resolve_model

    loaded = PromptBuilder.from_pretrained(resolve_model(model))
    tokenizer, template = loaded.tokenizer, loaded.template
    report = PreflightReport(model=model, segmented_tokenization=tokenizer.segmented)
    if not tokenizer.segmented:
        report.problems.append(
            "tokenizing by segments differs from whole-text tokenization; the gateway "
            "falls back to whole texts (slower, still exact)"
        )
    control_problem = _control_text_problem(PromptBuilder(template, tokenizer), tokenizer)
    report.control_text_as_text = control_problem is None
    if control_problem is not None:
        report.problems.append(control_problem)
    signer = ThinkingSigner("preflight")
    for wire_name, wire in wires(signer).items():
        for name, (steps, kwargs) in _scenarios(fmt).items():
            if kwargs and wire_name == "responses":
                continue  # Responses has no chat_template_kwargs
            report.checks += _checks(
                wire_name,
                name,
                steps,
                kwargs,
                wire,
                PromptBuilder(template, tokenizer),
                tokenizer,
                fmt,
                report.problems,
            )
    report.problems += _wire_forks(report.checks)
    return report


def _checks(
    wire_name: str,
    name: str,
    steps: list[Step],
    kwargs: dict | None,
    wire: WireRoundTrip,
    builder: PromptBuilder,
    tokenizer: ChatTokenizer,
    fmt: ReplyFormat,
    problems: list[str],
) -> list[TurnCheck]:
    found = problems if wire_name == "chat" else []  # parser problems are the model's, reported once
    runs = {p: _play(name, steps, kwargs, p, builder, tokenizer, fmt, found, wire) for p in POLICIES}
    out = []
    for turn in range(len(steps)):
        keep_plan, _ = runs["keep"][turn]
        drop_plan, drop_equal = runs["drop"][turn]
        exact = keep_plan.kind == "root" or keep_plan.reuse == "exact"
        out.append(
            TurnCheck(
                wire=wire_name,
                scenario=name,
                turn=turn + 1,
                exact=exact,
                detail=keep_plan.mismatch,
                keep=_action(keep_plan, "keep"),
                drop=_action(drop_plan, "drop"),
                retokenizes_equal=drop_equal,
            )
        )
    return out


def _wire_forks(checks: list[TurnCheck]) -> list[str]:
    """A turn that extends exactly on chat but not on another wire: that wire's mapping forks."""
    chat = {(c.scenario, c.turn): c.exact for c in checks if c.wire == "chat"}
    return [
        f"{c.wire}: {c.scenario}, turn {c.turn} extends on chat but not on {c.wire} ({c.detail})"
        for c in checks
        if c.wire != "chat" and chat.get((c.scenario, c.turn)) and not c.exact
    ]


def format_report(report: PreflightReport) -> str:
    lines = [
        f"preflight for model {report.model!r}: "
        f"{'OK' if report.ok else 'PROBLEMS'}; segment tokenization "
        f"{'exact' if report.segmented_tokenization else 'NOT exact (whole-text fallback)'}",
        "control-token text in message content: "
        f"{'tokenized as text' if report.control_text_as_text else 'NOT tokenized as text'}",
    ]
    current = None
    for c in report.checks:
        if (c.wire, c.scenario) != current:
            current = (c.wire, c.scenario)
            lines.append(f"\n{c.wire}: {c.scenario}")
        mark = "exact" if c.exact else "NOT an exact extension"
        lines.append(f"  turn {c.turn}: {mark}")
        if not c.retokenizes_equal:
            lines.append("    note: the reused prompt ids differ from tokenizing the rendered prompt whole")
        if not c.exact:
            lines.append(f"    why: {c.detail}")
            lines.append(f"    keep: {c.keep}")
            lines.append(f"    drop: {c.drop}")
    lines.extend(f"\nproblem: {p}" for p in report.problems)
    return "\n".join(lines)
