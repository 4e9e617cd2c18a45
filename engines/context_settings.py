"""What a conversation longer than the model's context becomes: one setting, from which the page's
control, the API's field and the command line's flag are built (engines/compaction.py does it)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from .settings import Settings, page_control

ContextPolicy = Literal["compact", "drop_oldest", "refuse"]


class ContextSettings(Settings):
    kind = "context"

    context_policy: ContextPolicy = Field(
        "compact", description="what a conversation longer than the model's context becomes: compact (its oldest turns "
                               "summarized by the model, in the open), drop_oldest (left out, with a note), or refuse",
        json_schema_extra=page_control("When the chat outgrows the context", elem_id="context-policy",
                                       info="compact: the oldest turns summarized by the model, in a message whose arrows ‹ › show what it replaced"),
    )
