"""What a reply's tools and the MCP servers may cost this server: the one home of each limit,
read where its cause is met (mcp_transports.py reads messages within the size, mcp_servers.py
lists within the pages, tools, schemas and time, agent_loop.py runs the calls of an answer and
cuts results). An MCP server is a program the operator chose, not one that was checked: one
that sends a result of 40 MB, a tool list that never ends or 20,000 tools would otherwise cost
every user of the app its CPU, its memory and a page of 20,000 checkboxes."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class ToolLimits(BaseModel):
    model_config = ConfigDict(frozen=True)

    # 4 MB of JSON is about a million tokens, more than a model's context holds: a result longer
    # than that is never read whole, and a tool list that long is no list a model chooses from.
    mcp_message_size: int = Field(4 * 2**20, gt=0, description="bytes of one message from an MCP server (a line over stdio, a "
                                                               "response body or event over HTTP), read no further: the server's "
                                                               "session ends (stdio) or its call fails (HTTP), saying so")
    mcp_list_pages: int = Field(20, gt=0, description="pages of one server's tool list read; its tools past them are left out, said in its status")
    mcp_tools_per_server: int = Field(256, gt=0, description="tools offered from one MCP server; those past them are left out, said in its status")
    mcp_schemas_size: int = Field(2**20, gt=0, description="bytes of one server's tools' names, descriptions and schemas together "
                                                           "(the model reads them all with every prompt); tools past them are left out")
    mcp_list_seconds: float = Field(30, gt=0, description="how long listing a server's tools again, once it says they changed, may "
                                                          "take; past it the tools listed before are kept, said in its status")
    calls_per_answer: int = Field(16, gt=0, description="tool calls of one answer that run; the model is told those past them did not")
    # 64 KB of text is 16,000 tokens or so: the context of a small model, a fair share of a large one's.
    result_characters_without_context: int = Field(64 * 2**10, gt=0, description="characters of a tool result kept where the model's "
                                                                                  "context length is unknown (a remote server that does "
                                                                                  "not say it); the rest is cut, with a note")


TOOL_LIMITS = ToolLimits()
