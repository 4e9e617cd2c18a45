"""Which tools a chat lets the model run, and for how many answers: one declaration, from which
the page's controls and the terminal chat's flags are built (engines/settings.py). The tools are
named from the catalog (catalog.py): the built-in ones, and those of the MCP servers connected."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from ..settings import Settings, page_control
from .agent_loop import STEP_LIMIT
from .builtin import BUILTIN_TOOLS
from .catalog import TOOL_CATALOG
from .toolbox import Tool


class ToolSettings(Settings):
    kind = "tool"

    run_tools: list[str] = Field(
        [], description=f"the tools the model may call that run on the server and answer it ({', '.join(BUILTIN_TOOLS)}, "
                   "and an MCP server's as server__tool)",
        json_schema_extra=page_control("Tools that run", choices=list(BUILTIN_TOOLS),
                                       info="The model may call these; they run and it goes on with their results"),
    )
    tool_choice: Literal["auto", "required"] = Field(
        "auto", description="auto: the model decides whether to call a tool; required: its first answer calls one (for models "
                            "that do not call tools on their own)",
        json_schema_extra=page_control("Tool call", info="required: the first answer must call a tool"),
    )
    ask_every_call: bool = Field(
        False, description="ask before every call runs, read-only tools' too (a tool that may change something always asks)",
        json_schema_extra=page_control("Ask before every call", info="Tools that may change something always ask first"),
    )
    tool_steps: int = Field(
        STEP_LIMIT, ge=1, le=50, description="how many times a reply may call tools before it must stop",
        json_schema_extra=page_control("Tool steps", step=1),
    )

    @field_validator("run_tools")
    @classmethod
    def _known(cls, names: list[str]) -> list[str]:
        names = list(dict.fromkeys(names))
        TOOL_CATALOG.choose(names)
        return names

    @classmethod
    def split(cls, settings: dict[str, Any]) -> tuple[ToolSettings, dict[str, Any]]:
        """These settings among ``settings`` (checked), and the others."""
        ours = {name: value for name, value in settings.items() if name in cls.model_fields and value is not None}
        return cls.build(**ours), {name: value for name, value in settings.items() if name not in cls.model_fields}

    def tools(self) -> dict[str, Tool]:
        """The tools chosen, by name (a ValueError where one no longer runs: its server went away)."""
        return TOOL_CATALOG.choose(self.run_tools)
