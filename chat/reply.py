"""One reply written into a tab's conversation: the message's documents fitted to the model's
context first (chat/long_documents.py), then the reply built from the turns, streamed from the
model, each item added to the reply's turn as it comes, and finished (its stats, or why it
failed). The page shows the turn as it is written (webui/reply_view.py).
Where the chat runs tools, the reply is the agent loop's (tools/agent_loop.py): the
model's answers, the calls that ran between them and their results, all in the one turn; where it
runs none, the model's one answer.

It is saved as every change of a tab's conversation is (chat/session.py: save): the
message as the reply starts, the reply every SAVE_INTERVAL seconds while it streams, and once it
ends, all from the server's side, so that a page closed meanwhile loses nothing; after it, the
sidebar keeps the settings it was written with (webui/chat_sidebar.py: keep_chat, whose save of
the turns finds nothing left to write). How a token gets from the model to the page, and how
Stop stops the model, is drawn in docs/life_of_a_token.md.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from engines import ChatError, ChatModel, ChatRequest, LoadedModels, ModelUnloadedError, PromptRead, QueuePlace, ReplyChunk, Response
from engines.compaction import Compacting, Compaction
from engines.request import MEDIA_KINDS
from limits import Limits
from tools import ApprovalAsked, StepLimitReached, ToolCatalog, ToolResult, ToolSettings, ToolsRunning, reply_with_tools

from .approval import ChatApproval
from .browser_python import browser_python
from .keeper import SAVE_INTERVAL
from .long_documents import Reading, fit_documents
from .notices import Notice, Tell, logged
from .reply_stats import ReplyClock
from .session import ChatSession, kept, save
from .streaming import UPDATE_INTERVAL, throttled
from .turns import SavedToolCall, SummaryNote, ToolStep, Turn, copied, kept_media, model_request, turn_messages


class Reply:
    """The answer of the model in ``loaded_models`` to ``session``'s conversation: a new assistant turn, or with
    ``continuing`` the last one written on. ``earlier`` is what that turn held before (nothing,
    for a new reply), so that the stats and a failure speak of what this reply wrote. The tools
    the chat runs are ``catalog``'s; ``limits``, what the user's documents may take of the
    library; ``tell`` says what the user must know beside the turn (a reply cut short, one not
    continued). Where it is written: ``place``, the turn's place in the session's tree (None until
    a new reply starts), after the turns at ``before``; while the message's documents are read,
    ``reading`` says how far."""

    def __init__(self, loaded_models: LoadedModels, session: ChatSession, continuing: bool, catalog: ToolCatalog, limits: Limits,
                 tell: Tell = logged) -> None:
        self.loaded_models = loaded_models
        self.catalog = catalog
        self.limits = limits
        self.tell = tell
        self.session = session
        self.continuing = continuing
        self.tree = tree = session.tree
        # The page's files are deleted after a while: a file that is gone is shown so, not sent
        # (unless the chat store keeps it: then the page gets a copy again).
        if session.keeper is not None:
            session.keeper.restore_media(session.turns)
        shown = tree.branch()
        for place in shown:
            tree.messages[place] = kept_media(tree.messages[place])
        self.asked = tree.messages[shown[-1]]
        self.place = shown[-1] if continuing else None
        self.turn = self.asked if continuing else Turn(role="assistant")
        self.earlier = self.turn.model_copy(deep=True)
        self.before = shown[:-1] if continuing else shown
        # The model that answers, once known.
        self.model_id: str | None = None
        self.reading: Reading | None = None

    async def written(self, settings: dict[str, Any], user: str | None, interval: float = UPDATE_INTERVAL) -> AsyncIterator[None]:
        """The reply, written (``user``: whom it counts for in the waiting line): each item is a
        change of the turn to show (the first, before any, the conversation as it stands); the
        turn holds its place in line while other requests keep the model busy; the changes come at
        most once per ``interval`` (chat/streaming.py).
        A request the model cannot take (no model, bad tools JSON, media it cannot read, too many
        waiting), or documents that cannot be fitted to its context, mark the user's turn with the
        reason (a continued reply: a warning, the reply as it was); the conversation itself stays
        as it was. ``settings`` hold the chat's ToolSettings besides what model_request takes,
        ``chat_model``: the id of the loaded model the chat asks (empty: the default one), and
        ``long_documents``: how documents past the context are read (LongDocumentSettings)."""
        session = self.session
        long_documents = settings.pop("long_documents", "auto")
        yield
        if not self.continuing:
            async for reading in self.documents_read(settings, user, long_documents):
                self.reading = reading
                yield
            self.reading = None
            if session.turns and session.turns[-1].error:
                await kept(session)
                return
        await kept(session, system=settings.get("system") or "", tools=settings.get("tools") or "")
        self.turn.writing = True
        ended = False
        try:
            model = chat_model(self.loaded_models, settings.pop("chat_model", ""))  # none: a ChatError, said on the user's turn
            self.model_id = model.model_id
            tools, settings = ToolSettings.split(settings, self.catalog)
            running = tools.tools(self.catalog)
            if "python" in running:  # run by this tab's browser
                running["python"] = browser_python(session)
            # A continued answer goes on with its text: it is no first answer to force a call in.
            forced = {"tool_choice": tools.tool_choice} if tools.tool_choice != "auto" and not self.continuing else {}
            request = model_request(session.turns, user=user, continue_final_message=self.continuing, running=tuple(running.values()),
                                    **forced, **settings)
            clock = ReplyClock(model)
            if not self.continuing:
                self.place = session.add(self.turn)
            # Without tools the agent loop would hand the model's one answer on as it is: the model's own stream then.
            stream = (reply_with_tools(model, request, running, tools.tool_steps, progress=True, approval=ChatApproval(session, tools.ask_every_call))
                      if running else model.astream_reply(request, progress=True))
            async for items in throttled(stream, lambda: session.reply.stopping, interval, arrived=clock.note):
                for item in items:
                    if isinstance(item, Compaction):
                        self.compacted(item, request)
                    else:
                        add(self.turn, item)
                yield
                await kept(session, every=SAVE_INTERVAL)
            self.finish(clock)
            ended = True
        except ChatError as error:
            self.fail(error)
            ended = True
        finally:
            self.turn.writing, self.turn.tool_text, self.turn.waiting, self.turn.reading, self.turn.asking = False, "", None, None, []
            self.turn.compacting = None
            if not ended:
                self.close()
        await kept(session)

    async def documents_read(self, settings: dict[str, Any], user: str | None, long_documents: str) -> AsyncIterator[Reading]:
        """The message's documents past what is left of the model's context, read (chat/long_documents.py)."""
        try:
            model = chat_model(self.loaded_models, settings.get("chat_model", ""))
        except ChatError:  # said on the user's turn, as the reply starts
            return
        async for reading in fit_documents(self.session, model, settings, self.limits, user, self.catalog, long_documents):
            yield reading

    def compacted(self, compaction: Compaction, request: ChatRequest) -> None:
        """The conversation was made smaller to fit the model's context: where messages were
        replaced (before the reply's first answer), the chat goes on in a new branch, the summary
        in their place; the messages it replaced stay in the branch before (‹1/2› on the summary)."""
        self.turn.compacting = None
        if not compaction.replaced or self.turn.steps or self.continuing:
            return
        tree = self.tree
        shown = tree.branch()[:-1]  # the reply's own place is last
        offset = 1 if request.messages and request.messages[0]["role"] == "system" else 0
        origin = [index for index, place in enumerate(shown) for _ in turn_messages(tree.messages[place], {kind: [] for kind in MEDIA_KINDS})]
        first, last = origin[compaction.at - offset], origin[compaction.at - offset + compaction.replaced - 1]
        summary = Turn(role="assistant", content=compaction.summary,
                       summary=SummaryNote(policy=compaction.policy, replaced=compaction.replaced, tokens_before=compaction.tokens_before,
                                           tokens_after=compaction.tokens_after, estimated=compaction.estimated,
                                           written_by=compaction.written_by))
        self.session.remove([self.place])
        place = tree.replace_shown(shown[first], shown[last], summary, copied)
        self.asked = tree.messages[place]
        self.before = tree.branch()
        self.place = self.session.add(self.turn)

    def new_text(self) -> str:
        """What the model wrote into the turn since ``earlier`` (all of it, for a new reply): the
        answer it went on with, and every answer after it (those that called tools are steps now)."""
        turn, earlier = self.turn, self.earlier
        first, *later = [*turn.steps[len(earlier.steps):], turn]
        return (first.reasoning[len(earlier.reasoning):] + first.content[len(earlier.content):]
                + "".join(answer.reasoning + answer.content for answer in later) + turn.tool_text)

    def finish(self, clock: ReplyClock) -> None:
        """The model has finished, or the user stopped it: the turn gets its stats line."""
        self.turn.stopped = self.session.reply.stopping
        self.turn.stats = clock.stats(self.new_text()).after(self.earlier.stats)

    def fail(self, error: ChatError) -> None:
        """The model could not answer, or stopped answering: a reply cut short keeps what it
        wrote, a continued one stays as it was, and a new one that never began is taken out,
        its reason shown on the user's turn."""
        turn, earlier = self.turn, self.earlier
        if turn.content != earlier.content or turn.reasoning != earlier.reasoning or turn.steps != earlier.steps:
            turn.stopped, turn.stats = True, None
            self.tell(Notice("chat.cut_short", {"error": str(error)}))
        elif self.continuing:
            self.tell(Notice("chat.not_continued", {"error": str(error)}))
        else:
            if self.place is not None:
                self.session.remove([self.place])
            self.asked.error = str(error)

    def close(self) -> None:
        """The page closed the reply mid-stream (a reload, a switch of chats), where nothing can
        be awaited: it is kept as stopped, and saved at once."""
        self.turn.stopped = True
        if self.new_text():
            self.turn.stats = None  # they would cover less than is written now
        save(self.session)


def chat_model(loaded_models: LoadedModels, model_id: str) -> ChatModel:
    """The loaded model of that id (empty: the default model), or a ChatError that says what to
    do. Where one model replaces another, every chat goes on with the one loaded."""
    model = loaded_models.for_request(model_id or None if loaded_models.several else None)
    if model is None:
        loaded = ", ".join(loaded.model_id for loaded in loaded_models.models) or "none"
        raise ModelUnloadedError(f"This chat's model, {model_id}, is not loaded now (loaded: {loaded}). Pick a loaded model "
                                 "in the Model list beside the chat, or ask an admin to load it in the Settings tab.")
    return model


def add(turn: Turn, item: Any) -> None:
    """One item of the reply (reply_with_tools: ChatModel.astream_reply's, and the tools') into
    the assistant turn being written. Where the answer's calls run, it becomes a step, and the
    turn goes on with the next answer."""
    if isinstance(item, QueuePlace):
        turn.waiting = item.ahead
        return
    if isinstance(item, Compacting):
        turn.compacting, turn.waiting = item, None
        return
    if isinstance(item, PromptRead):
        turn.reading = item
        return
    turn.reading = None  # the prompt is read: what comes now is the answer, or the end of a step
    if isinstance(item, ToolsRunning):
        turn.steps.append(ToolStep(reasoning=turn.reasoning, content=turn.content, tool_calls=turn.tool_calls))
        turn.reasoning, turn.content, turn.tool_calls = "", "", []
    elif isinstance(item, ApprovalAsked):
        turn.asking = [call.id for call in item.calls]
    elif isinstance(item, ToolResult):
        turn.asking = []
        call = next(call for call in turn.steps[-1].tool_calls if call.id == item.call.id)
        call.result, call.error, call.seconds = item.content, item.error, item.seconds
    elif isinstance(item, StepLimitReached):
        turn.step_limit = item.steps
    elif isinstance(item, Response):  # the finished reply: its tool calls are parsed now
        turn.tool_calls = [SavedToolCall(id=c.id, name=c.name, arguments=c.arguments) for c in item.parts.tool_calls]
        turn.tool_text = ""
    elif not isinstance(item, ReplyChunk):  # a token's logprobs (asked for in the model's defaults): the page shows none
        return
    elif item.kind == "reasoning":
        turn.reasoning += item.text
    elif item.kind == "content":
        turn.content += item.text
    else:
        turn.tool_text += item.text
