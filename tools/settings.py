"""Which tools a chat lets the model run, and for how many answers: one declaration, from which
the page's controls and the terminal chat's flags are built (engines/settings.py). The tools are
named from the catalog the settings are built for (catalog.py; the app's, handed to them): the
built-in ones, and those of the MCP servers connected."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator

from engines.settings import Settings, page_control

from .agent_loop import STEP_LIMIT
from .builtin import BUILTIN_TOOLS
from .catalog import ToolCatalog
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
    def _known(cls, names: list[str], info: ValidationInfo) -> list[str]:
        """Each name once, and each a tool of the catalog the settings are built for (build_for,
        split). Settings built in code without one are checked as their tools are chosen (tools)."""
        names = list(dict.fromkeys(names))
        catalog: ToolCatalog | None = (info.context or {}).get("catalog")
        if catalog is not None:
            catalog.choose(names)
        return names

    @classmethod
    def build_for(cls, catalog: ToolCatalog, **values: Any) -> ToolSettings:
        """The settings from ``values``, each tool they name one of ``catalog``'s; else a
        ConfigError that says what is wrong (a name that runs no tool: which, why, and the tools)."""
        return cls.build_in({"catalog": catalog}, **values)

    @classmethod
    def split(cls, settings: dict[str, Any], catalog: ToolCatalog) -> tuple[ToolSettings, dict[str, Any]]:
        """These settings among ``settings`` (checked against ``catalog``), and the others."""
        ours = {name: value for name, value in settings.items() if name in cls.model_fields and value is not None}
        return cls.build_for(catalog, **ours), {name: value for name, value in settings.items() if name not in cls.model_fields}

    def tools(self, catalog: ToolCatalog) -> dict[str, Tool]:
        """The tools chosen, by name, of ``catalog`` (a ValueError where one no longer runs: its
        server went away)."""
        return catalog.choose(self.run_tools)
