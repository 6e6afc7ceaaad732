"""Sample a small ALFWorld room and task, and write it as an ALFRED PDDL problem.

A sampled game has the task's own receptacles (where the object starts, where it
must go, the microwave / fridge / sink basin / desk lamp the task needs), filled up
to `GameSize.receptacles` with other receptacles of the room, plus
`GameSize.distractors` unrelated objects. Names are THOR ids mangled the way ALFRED
mangles them, so ALFWorld's demangler turns them into `countertop 1`, `apple 2`, ...
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from roost.envs.alfworld.scenes import (
    LAMP,
    LAMP_HOLDERS,
    MOVABLE_RECEPTACLES,
    OPENABLE,
    ROOM_OBJECTS,
    ROOM_RECEPTACLES,
    SCENE_NUMBERS,
    IdMaker,
    Knowledge,
    pddl_name,
)

TASK_TYPES = (
    "pick_and_place_simple",
    "look_at_obj_in_light",
    "pick_clean_then_place_in_recep",
    "pick_heat_then_place_in_recep",
    "pick_cool_then_place_in_recep",
    "pick_two_obj_and_place",
)
# The appliance each task needs, and the object property that appliance changes.
APPLIANCES = {
    "pick_clean_then_place_in_recep": ("SinkBasin", "cleanable"),
    "pick_heat_then_place_in_recep": ("Microwave", "heatable"),
    "pick_cool_then_place_in_recep": ("Fridge", "coolable"),
}


class GameSpecError(ValueError):
    """A requested game cannot be built (for example, too few receptacles)."""


@dataclass(frozen=True)
class GameSize:
    receptacles: int = 6
    """Receptacle instances in the room, counting the ones the task needs (2 or 3 by task type)."""
    distractors: int = 4
    """Objects in the room besides the task's own."""


@dataclass(frozen=True)
class Thing:
    thor_id: str
    kind: str
    location: str
    receptacle: str | None = None
    """For an object: the THOR id of the receptacle it lies in."""


@dataclass
class Game:
    task_type: str
    room: str
    scene_num: int
    object_target: str
    parent_target: str
    toggle_target: str
    agent_location: str
    receptacles: list[Thing] = field(default_factory=list)
    objects: list[Thing] = field(default_factory=list)

    @property
    def task_dir_name(self) -> str:
        last = self.toggle_target or self.parent_target
        return f"{self.task_type}-{self.object_target}-None-{last}-{self.scene_num}"


def sample_game(
    task_type: str, rng: random.Random, knowledge: Knowledge, size: GameSize, *, unseen: bool = False
) -> Game:
    if task_type not in TASK_TYPES:
        raise GameSpecError(f"unknown task type {task_type!r}; expected one of {', '.join(TASK_TYPES)}")
    room = rng.choice(_rooms_for(task_type))
    obj, kinds, parent, toggle = _choose_task(task_type, room, rng, knowledge)
    if size.receptacles < len(kinds):
        raise GameSpecError(f"{task_type} needs at least {len(kinds)} receptacles, got receptacles={size.receptacles}")
    kinds += [rng.choice(ROOM_RECEPTACLES[room]) for _ in range(size.receptacles - len(kinds))]
    ids = IdMaker(rng)
    receptacles = [Thing(ids.thing(k), k, ids.location()) for k in kinds]
    scenes = SCENE_NUMBERS[room][1 if unseen else 0]
    game = Game(task_type, room, rng.choice(scenes), obj, parent, toggle, ids.location(), receptacles)
    start = receptacles[0]
    for _ in range(2 if task_type == "pick_two_obj_and_place" else 1):
        game.objects.append(_place(ids, obj, start))
    if toggle:
        game.objects.append(_place(ids, LAMP, receptacles[2]))
    _add_distractors(game, rng, knowledge, size.distractors, ids)
    return game


def _rooms_for(task_type: str) -> list[str]:
    if task_type == "look_at_obj_in_light":
        return ["LivingRoom", "Bedroom"]
    if task_type in APPLIANCES:
        appliance = APPLIANCES[task_type][0]
        return [room for room, kinds in ROOM_RECEPTACLES.items() if appliance in kinds]
    return list(ROOM_RECEPTACLES)


def _choose_task(
    task_type: str, room: str, rng: random.Random, knowledge: Knowledge
) -> tuple[str, list[str], str, str]:
    """Pick (object, [start, goal-or-lamp-holder, appliance?], parent, toggle)."""
    pool = ROOM_RECEPTACLES[room]
    appliance, prop = APPLIANCES.get(task_type, (None, None))
    options = []
    for obj in ROOM_OBJECTS[room]:
        if prop and obj not in getattr(knowledge, prop):
            continue
        starts = [r for r in pool if knowledge.holds(r, obj) and r != appliance]
        if task_type == "look_at_obj_in_light":
            holders = [h for h in LAMP_HOLDERS if h in pool]
            options += [(obj, [s, "", h]) for s in starts for h in holders if s != h]
            continue
        parents = [r for r in pool if knowledge.holds(r, obj) and r != appliance]
        options += [(obj, [s, p]) for s in starts for p in parents if s != p]
    if not options:
        raise GameSpecError(f"no object in a {room} fits {task_type}")
    obj, kinds = rng.choice(options)
    if task_type == "look_at_obj_in_light":
        return obj, [kinds[0], rng.choice(ROOM_RECEPTACLES[room]), kinds[2]], "", LAMP
    return obj, kinds + ([appliance] if appliance else []), kinds[1], ""


def _place(ids: IdMaker, kind: str, receptacle: Thing) -> Thing:
    return Thing(ids.thing(kind), kind, receptacle.location, receptacle.thor_id)


def _add_distractors(game: Game, rng: random.Random, knowledge: Knowledge, count: int, ids: IdMaker) -> None:
    # Distractors never share the target's type, so the goal holds only once the agent acts.
    for _ in range(count):
        kinds = [k for k in ROOM_OBJECTS[game.room] if k != game.object_target]
        kind = rng.choice(kinds)
        homes = [r for r in game.receptacles if knowledge.holds(r.kind, kind)]
        if homes:
            game.objects.append(_place(ids, kind, rng.choice(homes)))


def problem_pddl(game: Game, knowledge: Knowledge, problem_id: str) -> str:
    """The game as an ALFRED PDDL problem over ALFWorld's `alfred` domain."""
    from alfworld.gen import goal_library

    rtypes = sorted({r.kind for r in game.receptacles} | {game.parent_target} - {""})
    otypes = sorted({o.kind for o in game.objects})
    declared = ["agent1 - agent"]
    declared += [f"{t}Type - otype" for t in otypes] + [f"{t}Type - rtype" for t in rtypes]
    declared += [f"{pddl_name(o.thor_id)} - object" for o in game.objects]
    declared += [f"{pddl_name(r.thor_id)} - receptacle" for r in game.receptacles]
    locations = sorted({r.location for r in game.receptacles} | {game.agent_location})
    declared += [f"{pddl_name(loc)} - location" for loc in locations]
    init = [f"(atLocation agent1 {pddl_name(game.agent_location)})"]
    init += [fact for r in game.receptacles for fact in _receptacle_facts(r)]
    init += [fact for o in game.objects for fact in _object_facts(o, knowledge)]
    init += [f"(canContain {r}Type {o}Type)" for r in rtypes for o in otypes if knowledge.holds(r, o)]
    goal = (
        goal_library.gdict[game.task_type]["pddl"]
        .format(obj=game.object_target, recep=game.parent_target, toggle=game.toggle_target)
        .replace("#", "-")
    )
    lines = [f"(define (problem plan_{problem_id})", "(:domain alfred)", "(:objects"]
    lines += [f"        {d}" for d in declared] + ["        )", "    (:init"]
    lines += [f"        {f}" for f in init] + ["        )", goal]
    return "\n".join(lines) + "\n"


def _receptacle_facts(r: Thing) -> list[str]:
    name = pddl_name(r.thor_id)
    facts = [f"(receptacleType {name} {r.kind}Type)", f"(receptacleAtLocation {name} {pddl_name(r.location)})"]
    if r.kind in OPENABLE:
        facts.append(f"(openable {name})")
    return facts


def _object_facts(o: Thing, knowledge: Knowledge) -> list[str]:
    name = pddl_name(o.thor_id)
    facts = [
        f"(objectType {name} {o.kind}Type)",
        f"(inReceptacle {name} {pddl_name(o.receptacle or '')})",
        f"(objectAtLocation {name} {pddl_name(o.location)})",
    ]
    if o.kind == LAMP:
        return facts + [f"(toggleable {name})"]
    facts.append(f"(pickupable {name})")
    for prop in ("cleanable", "heatable", "coolable", "sliceable"):
        if o.kind in getattr(knowledge, prop):
            facts.append(f"({prop} {name})")
    if o.kind in MOVABLE_RECEPTACLES:
        facts.append(f"(isReceptacleObject {name})")
    return facts
