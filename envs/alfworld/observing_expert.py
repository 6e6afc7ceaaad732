"""An ALFWorld expert that acts only on what the agent observes, so a model can imitate it.

The planner expert (`roost.agents.expert`, on `info["expert_plan"]`) reads the PDDL plan,
which knows where every object is; a model that sees only the text cannot copy that. This
expert sees what the model sees, the observation text with its admissible commands, and
plays the way a careful person would: read the goal, visit the receptacles in the order the
room lists them (opening closed ones) until the object shows up, take it, clean / heat / cool
it or find the lamp, then go to the goal receptacle and put it there. Everything it needs to
remember (where it saw a second object) was in an earlier observation.

    roost eval alfworld --agent observing-expert --episodes 12

It is a scripted player (`roost.agents.player`): it picks commands, and the player harness
plays them through the runner, so this module knows ALFWorld and nothing of the runner.
`order="random"` visits the receptacles in a random order per episode: more varied
demonstrations of the same policy. `slips=0.2` makes a learner's mistake before one turn in
five (a detour to another receptacle, the same move again, a wrong number) and then carries
on from wherever that left it; the turns of the slips are listed in
`AgentOutcome.extra["slips"]`, so SFT can show recoveries without training on the mistakes.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from typing import Any

from roost.envs.protocol import Reset, Step


class ExpertStuck(RuntimeError):
    """The expert cannot go on (a goal it does not know, an object it cannot find)."""


# ALFWorld's goal templates (alfworld.gen.goal_library) for the six task types.
GOALS = [
    ("two", r"(?:put|find) two (?P<obj>[a-z ]+?) (?:in|and put them in) (?P<recep>[a-z ]+)"),
    ("clean", r"(?:put a clean (?P<obj>[a-z ]+?) in|clean some (?P<obj2>[a-z ]+?) and put it in) (?P<recep>[a-z ]+)"),
    ("heat", r"(?:put a hot (?P<obj>[a-z ]+?) in|heat some (?P<obj2>[a-z ]+?) and put it in) (?P<recep>[a-z ]+)"),
    ("cool", r"(?:put a cool (?P<obj>[a-z ]+?) in|cool some (?P<obj2>[a-z ]+?) and put it in) (?P<recep>[a-z ]+)"),
    ("light", r"(?:look at (?P<obj>[a-z ]+?) under the|examine the (?P<obj2>[a-z ]+?) with the) (?P<recep>[a-z ]+)"),
    ("place", r"put (?:a|some) (?P<obj>[a-z ]+?) (?:in|on) (?P<recep>[a-z ]+)"),
]
APPLIANCE = {"clean": ("sinkbasin", "clean"), "heat": ("microwave", "heat"), "cool": ("fridge", "cool")}


@dataclass
class Goal:
    kind: str
    obj: str
    recep: str
    """The goal receptacle's type, or the lamp's for `light` tasks."""
    count: int = 1


def parse_goal(text: str) -> Goal:
    """The goal from the observation's 'Your task is to: ...' line."""
    line = re.search(r"Your task is to: (.+?)\.?\s*$", text, re.M)
    if line is None:
        raise ExpertStuck("no 'Your task is to:' line in the first observation; is this ALFWorld?")
    for kind, pattern in GOALS:
        match = re.fullmatch(pattern, line.group(1).strip().lower())
        if match:
            obj = match.group("obj") or match.groupdict().get("obj2")
            return Goal(kind, obj.strip(), match.group("recep").strip(), 2 if kind == "two" else 1)
    raise ExpertStuck(f"the observing expert does not know the goal {line.group(1)!r}")


@dataclass
class _Memory:
    """What the agent has seen so far."""

    goal: Goal
    order: list[str]
    seen: dict[str, str] = field(default_factory=dict)
    """receptacle → the last text seen there"""
    placed: int = 0
    target: str | None = None
    """The goal receptacle the first object went into; a second one must join it there."""
    holding: str | None = None
    treated: bool = False

    def is_target(self, place: str) -> bool:
        """Whether `place` is where objects go (any instance of the goal's type until one is used)."""
        return place == self.target if self.target else place.startswith(self.goal.recep + " ")


@dataclass(frozen=True)
class Move:
    command: str
    slip: bool = False
    """A deliberate mistake: the env may refuse it, and the game goes on unchanged."""


class ObservingExpert:
    """Plays ALFWorld from the observations and admissible commands alone."""

    name = "observing-expert"

    def __init__(self, order: str = "listed", slips: float = 0.0, seed: int | None = None) -> None:
        if order not in ("listed", "random"):
            raise ValueError(f"order must be 'listed' or 'random', not {order!r}")
        if not 0.0 <= slips < 1.0:
            raise ValueError(f"slips is a probability in [0, 1), got {slips}")
        self.order, self.slips, self.seed = order, slips, seed
        self._plays: dict[str, int] = {}

    def _episode_rng(self, task_id: str) -> random.Random:
        """Its own generator per (seed, task, play): the same episodes however they interleave."""
        play = self._plays.get(task_id, 0)
        self._plays[task_id] = play + 1
        return random.Random(f"{self.seed}/{task_id}/{play}") if self.seed is not None else random.Random()

    def start(self, task_id: str, reset: Reset) -> ObservingGame:
        """One episode's play from its first observation."""
        admissible = list(reset.info.get("admissible_commands") or [])
        places = [c[len("go to ") :] for c in admissible if c.startswith("go to ")]
        rng = self._episode_rng(task_id)
        if self.order == "random":
            rng.shuffle(places)
        return ObservingGame(
            _Memory(parse_goal(reset.observation.text), places), rng, self.slips, reset.observation.text, admissible
        )


class ObservingGame:
    """The expert in one episode: what it has seen, and the turns it slipped on."""

    def __init__(self, memory: _Memory, rng: random.Random, slips: float, text: str, admissible: list[str]) -> None:
        self.memory, self.rng, self.slip_rate = memory, rng, slips
        self.text, self.admissible = text, admissible
        self.slips: list[int] = []
        self.last = ""

    def move(self, turn: int) -> Move:
        command = next_command(self.memory, self.text, self.admissible)
        slipped = bool(self.slip_rate) and (turn - 1) not in self.slips and self.rng.random() < self.slip_rate
        if slipped:
            self.slips.append(turn)
            command = _slip(self.rng, command, self.last, self.admissible)
        self.last = command
        return Move(command, slipped)

    def observe(self, command: str, step: Step) -> None:
        _remember(self.memory, command, step.observation.text)
        self.text, self.admissible = step.observation.text, list(step.info.get("admissible_commands") or [])

    @property
    def extra(self) -> dict[str, Any]:
        return {"slips": self.slips}


def _slip(rng: random.Random, command: str, last: str, admissible: list[str]) -> str:
    """A learner's mistake instead of `command`: a detour, the same move again, a wrong number."""
    roll = rng.random()
    detours = [c for c in admissible if c.startswith("go to ") and c != command]
    if roll < 0.4 and detours:
        return rng.choice(detours)
    if roll < 0.7 and last.startswith("go to "):
        return last
    return re.sub(r"\d+", lambda m: str(int(m.group()) + 1), command, count=1)


def _remember(memory: _Memory, command: str, observation: str) -> None:
    first = observation.split("\n\nAdmissible commands:")[0]
    if command.startswith(("go to ", "open ")):
        if not first.startswith(("You arrive at", "You open")):
            return  # "Nothing happens.": keep what was seen there before
        place = command.split(" ", 2)[-1] if command.startswith("go to ") else command[len("open ") :]
        memory.seen[place] = first
    elif command.startswith("take "):
        memory.holding = command.split(" from ")[0][len("take ") :]
    elif command.startswith(("clean ", "heat ", "cool ")):
        memory.treated = True
    elif command.startswith("move "):
        memory.holding, memory.treated = None, False
        memory.target = command.split(" to ", 1)[1]
        memory.placed += 1


def _instances(admissible: list[str], prefix: str, kind: str) -> list[str]:
    """Commands starting with `prefix` whose object is an instance of `kind` ('apple 1')."""
    pattern = re.compile(rf"{re.escape(prefix)}{re.escape(kind)} \d+\b")
    return [c for c in admissible if pattern.match(c)]


def next_command(memory: _Memory, text: str, admissible: list[str]) -> str:
    """The expert's command for this observation."""
    goal = memory.goal
    here = _location(text, memory)
    opener = [c for c in admissible if here and c == f"open {here}"]
    if opener and "is closed" in text.split("\n\nAdmissible commands:")[0]:
        return opener[0]
    if memory.holding is None:
        return _find_and_take(memory, admissible)
    if goal.kind == "light":
        lamps = _instances(admissible, "use ", goal.recep)
        return lamps[0] if lamps else _seek(memory, admissible, goal.recep)
    if goal.kind in APPLIANCE and not memory.treated:
        appliance, verb = APPLIANCE[goal.kind]
        treat = [c for c in admissible if c.startswith(f"{verb} {memory.holding} with {appliance}")]
        return treat[0] if treat else _go_to_kind(memory, admissible, appliance)
    put = [
        c for c in admissible if c.startswith(f"move {memory.holding} to ") and memory.is_target(c.split(" to ", 1)[1])
    ]
    if put:
        return put[0]
    if memory.target and f"go to {memory.target}" in admissible:
        return f"go to {memory.target}"
    return _go_to_kind(memory, admissible, goal.recep)


def _find_and_take(memory: _Memory, admissible: list[str]) -> str:
    goal = memory.goal
    takes = [c for c in _instances(admissible, "take ", goal.obj) if not memory.is_target(c.split(" from ", 1)[1])]
    return takes[0] if takes else _seek(memory, admissible, goal.obj)


def _seek(memory: _Memory, admissible: list[str], kind: str) -> str:
    """Go where a `kind` was seen earlier (not the goal receptacle), else to the next unseen place."""
    for place, seen in memory.seen.items():
        if not memory.is_target(place) and re.search(rf"\b{re.escape(kind)} \d+", seen):
            if f"go to {place}" in admissible:
                return f"go to {place}"
    for place in memory.order:
        if place not in memory.seen and f"go to {place}" in admissible:
            return f"go to {place}"
    for place, seen in memory.seen.items():  # a closed receptacle that was never opened
        if "is closed" in seen and f"go to {place}" in admissible:
            return f"go to {place}"
    raise ExpertStuck(f"looked everywhere and found no {kind}")


def _go_to_kind(memory: _Memory, admissible: list[str], kind: str) -> str:
    targets = _instances(admissible, "go to ", kind)
    if not targets:
        raise ExpertStuck(f"no {kind} to go to; admissible: {admissible}")
    return targets[0]


def _location(text: str, memory: _Memory) -> str | None:
    match = re.search(r"You arrive at ([a-z ]+ \d+)\.", text) or re.search(r"You open the ([a-z ]+ \d+)\.", text)
    return match.group(1) if match else None
