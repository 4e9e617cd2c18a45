"""What the chat core tells its user beside the conversation itself: a chat that could not be
saved, a reply cut short, a request refused. The core names each by its key in the page's word
catalog (webui/languages/), with the values to fill in; the page says it in the user's language.
Whoever runs the core passes how to tell (``Tell``); without one, it is logged."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Notice:
    """``key``: the words' key; ``values``: what they name; ``level``: "info" for news, "warning"
    for what did not happen as the user asked."""

    key: str
    values: dict[str, Any] = field(default_factory=dict)
    level: Literal["info", "warning"] = "warning"


Tell = Callable[[Notice], None]


def logged(notice: Notice) -> None:
    """The Tell of a core run with nobody to read its notices (a test, a script)."""
    logger.log(logging.INFO if notice.level == "info" else logging.WARNING, "%s %s", notice.key, notice.values)
