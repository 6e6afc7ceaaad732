"""What makes a tool an OpenAI function tool, as chat completion requests take them."""

from __future__ import annotations

import json
import re
from typing import Any

NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
"""OpenAI's rule for function names."""
TOOL_KEYS = {"type", "function"}
FUNCTION_KEYS = {"name", "description", "parameters", "strict"}


def tool_problems(tools: Any) -> list[str]:
    """Why `tools` is not a list of OpenAI function tools (empty when it is)."""
    if not isinstance(tools, list):
        return [f"tools must be a list of OpenAI function tools, got {type(tools).__name__}"]
    problems = [p for i, tool in enumerate(tools) for p in _problems(i, tool)]
    names = [t["function"]["name"] for t in tools if not _problems(0, t)]
    problems += [f"two tools are named {n!r}" for n in sorted({n for n in names if names.count(n) > 1})]
    return problems


def _problems(index: int, tool: Any) -> list[str]:
    where = f"tool {index}"
    if not isinstance(tool, dict) or tool.get("type") != "function":
        return [f"{where} must be {{'type': 'function', 'function': {{...}}}}, got {tool!r:.120}"]
    function = tool.get("function")
    if not isinstance(function, dict):
        return [f"{where}: 'function' must be an object, got {function!r:.120}"]
    name = function.get("name")
    problems = [f"{where} has unknown keys {sorted(set(tool) - TOOL_KEYS)}"] if set(tool) - TOOL_KEYS else []
    if set(function) - FUNCTION_KEYS:
        problems.append(f"{where}: 'function' has unknown keys {sorted(set(function) - FUNCTION_KEYS)}")
    if not isinstance(name, str) or not NAME.match(name):
        problems.append(f"{where}: the name must match {NAME.pattern}, got {name!r}")
    if not isinstance(function.get("description", ""), str):
        problems.append(f"{where}: the description must be a string")
    problems += [f"{where} ({name}): {p}" for p in _parameter_problems(function.get("parameters", {"type": "object"}))]
    try:
        json.dumps(tool)
    except (TypeError, ValueError) as exc:
        problems.append(f"{where} ({name}) is not JSON: {exc}")
    return problems


def _parameter_problems(parameters: Any) -> list[str]:
    """The parameters must be a JSON schema of an object, as OpenAI requires."""
    if not isinstance(parameters, dict) or parameters.get("type") != "object":
        return [f"'parameters' must be a JSON schema with type 'object', got {parameters!r:.120}"]
    properties = parameters.get("properties", {})
    if not isinstance(properties, dict) or not all(isinstance(v, dict) for v in properties.values()):
        return ["'parameters.properties' must map each argument name to a JSON schema"]
    required = parameters.get("required", [])
    if not isinstance(required, list) or not set(required) <= set(properties):
        return [f"'parameters.required' must list declared properties, got {required!r:.120}"]
    return []
