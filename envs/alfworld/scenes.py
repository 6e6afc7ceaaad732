"""What a generated ALFWorld room may contain, and how THOR names things.

The tables are a small, hand-picked slice of ALFRED's own knowledge
(`alfworld.gen.constants`): which receptacles each kind of room has, which objects lie
around, which receptacle may hold which object, and which objects can be heated,
cooled or cleaned. The generator reads the object/receptacle compatibility and the
object properties from ALFRED itself, so a generated game never allows what ALFRED
would not.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

# Receptacle types that each kind of room offers, most characteristic first.
ROOM_RECEPTACLES: dict[str, tuple[str, ...]] = {
    "Kitchen": (
        "CounterTop",
        "Cabinet",
        "Drawer",
        "Fridge",
        "Microwave",
        "SinkBasin",
        "StoveBurner",
        "DiningTable",
        "GarbageCan",
        "CoffeeMachine",
        "Shelf",
        "SideTable",
    ),
    "LivingRoom": (
        "Sofa",
        "CoffeeTable",
        "SideTable",
        "ArmChair",
        "Drawer",
        "Shelf",
        "GarbageCan",
        "Dresser",
        "Ottoman",
        "TVStand",
    ),
    "Bedroom": (
        "Bed",
        "Desk",
        "Dresser",
        "Drawer",
        "SideTable",
        "Shelf",
        "GarbageCan",
        "Safe",
        "LaundryHamper",
    ),
    "Bathroom": (
        "CounterTop",
        "SinkBasin",
        "Toilet",
        "Cabinet",
        "Drawer",
        "GarbageCan",
        "Shelf",
        "TowelHolder",
        "HandTowelHolder",
    ),
}

# Objects that lie around in each kind of room (all pickupable).
ROOM_OBJECTS: dict[str, tuple[str, ...]] = {
    "Kitchen": (
        "Apple",
        "Bread",
        "Egg",
        "Lettuce",
        "Potato",
        "Tomato",
        "Mug",
        "Cup",
        "Bowl",
        "Plate",
        "Pan",
        "Pot",
        "Fork",
        "Spoon",
        "Knife",
        "ButterKnife",
        "Spatula",
        "Ladle",
        "DishSponge",
        "SaltShaker",
        "PepperShaker",
        "SoapBottle",
        "Kettle",
        "WineBottle",
    ),
    "LivingRoom": (
        "RemoteControl",
        "Newspaper",
        "Statue",
        "Vase",
        "Watch",
        "KeyChain",
        "CreditCard",
        "Laptop",
        "Pillow",
        "Book",
        "CellPhone",
        "TissueBox",
    ),
    "Bedroom": (
        "Book",
        "CD",
        "CellPhone",
        "CreditCard",
        "KeyChain",
        "Pen",
        "Pencil",
        "AlarmClock",
        "Laptop",
        "Pillow",
        "Watch",
        "BasketBall",
        "BaseballBat",
        "TennisRacket",
        "Cloth",
        "Mug",
        "Bowl",
    ),
    "Bathroom": (
        "SoapBar",
        "SoapBottle",
        "ToiletPaper",
        "HandTowel",
        "Cloth",
        "SprayBottle",
        "Candle",
        "DishSponge",
        "TissueBox",
    ),
}

# ALFRED scene numbers per room kind; valid_unseen draws from held-out scenes.
SCENE_NUMBERS: dict[str, tuple[range, range]] = {
    "Kitchen": (range(1, 26), range(26, 31)),
    "LivingRoom": (range(201, 226), range(226, 231)),
    "Bedroom": (range(301, 326), range(326, 331)),
    "Bathroom": (range(401, 426), range(426, 431)),
}

OPENABLE = frozenset({"Fridge", "Cabinet", "Microwave", "Drawer", "Safe"})
LAMP = "DeskLamp"
LAMP_HOLDERS = ("Desk", "SideTable", "Dresser")
# THOR splits a sink into the sink and its basin; the basin is the receptacle, and
# ALFWorld's name demangler expects its id to look like `Sink|x|y|z|SinkBasin`.
BASIN_PARENTS = {"SinkBasin": "Sink", "BathtubBasin": "Bathtub"}
MOVABLE_RECEPTACLES = frozenset({"Bowl", "Box", "Cup", "Mug", "Plate", "Pan", "Pot"})


@dataclass(frozen=True)
class Knowledge:
    """ALFRED's compatibility and property tables, read from `alfworld.gen.constants`."""

    can_contain: dict[str, frozenset[str]]
    heatable: frozenset[str]
    coolable: frozenset[str]
    cleanable: frozenset[str]
    sliceable: frozenset[str]

    @classmethod
    def from_alfred(cls) -> Knowledge:
        from alfworld.gen import constants

        actions = constants.VAL_ACTION_OBJECTS
        return cls(
            can_contain={k: frozenset(v) for k, v in constants.VAL_RECEPTACLE_OBJECTS.items()},
            heatable=frozenset(actions["Heatable"]),
            coolable=frozenset(actions["Coolable"]),
            cleanable=frozenset(actions["Cleanable"]),
            sliceable=frozenset(actions["Sliceable"]),
        )

    def holds(self, receptacle: str, obj: str) -> bool:
        return obj in self.can_contain.get(receptacle, ())


def thor_coordinate(value: float) -> str:
    """THOR's fixed-width coordinate: `+01.25`, `-00.50`, and `00.00` for zero."""
    sign = "+" if value > 0 else "-" if value < 0 else ""
    return f"{sign}{abs(value):05.2f}"


class IdMaker:
    """Unique THOR-style ids (`Apple|-01.23|+00.91|-02.34`) and locations (`loc|x|z|r|h`)."""

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng
        self._used: set[str] = set()

    def _unique(self, make) -> str:
        while True:
            candidate = make()
            if candidate not in self._used:
                self._used.add(candidate)
                return candidate

    def thing(self, kind: str) -> str:
        def make() -> str:
            xyz = "|".join(thor_coordinate(round(self._rng.uniform(-3, 3), 2)) for _ in range(3))
            parent = BASIN_PARENTS.get(kind)
            return f"{parent}|{xyz}|{kind}" if parent else f"{kind}|{xyz}"

        return self._unique(make)

    def location(self) -> str:
        def make() -> str:
            x, z = self._rng.randint(-12, 12), self._rng.randint(-12, 12)
            rotation, horizon = self._rng.randint(0, 3), self._rng.choice((-30, 0, 15, 30, 45, 60))
            return f"loc|{x}|{z}|{rotation}|{horizon}"

        return self._unique(make)


def pddl_name(thor_id: str) -> str:
    """Mangle a THOR id into a PDDL symbol the way ALFRED does (and ALFWorld demangles)."""
    for old, new in (("-", "_minus_"), ("|", "_bar_"), ("+", "_plus_"), (".", "_dot_"), (",", "_comma_")):
        thor_id = thor_id.replace(old, new)
    return thor_id
