"""Documents longer than the model's context, answered from their passages.

A document that fits what is left of the context goes into the message whole, as before. One
that does not is split into passages (``passages.py``), each embedded by a small model that ships
in a Python package, in a worker process at the lowest priority (``embedder.py``), and kept in
its owner's library in the chat store (store/library.py: full-text index and vectors beside the
chats). For each question the passages
it is most about are found by both, fused (``retrieval.py``), and given to the model numbered, to
cite as [1], [2]; ``citations.py`` maps a reply's citations back to them. ``fitting.py`` makes
the choice, and says it in numbers. A question about the whole of a document is answered from
what the server counts in it (``outline.py``) and the model's notes of all its parts
(``whole_document.py``), chosen by the question's words or by hand (its LongDocumentSettings).
"""
