"""The prompt and media path: a checked request rendered with the model's own chat template and
tokenized (builder.py, template.py), its media read within the request's budget (media.py,
media_budget.py) and handed to the model's own processor (processor.py); and back, the model's
tokens turned into text (text_stream.py) and read as reasoning, content and tool calls
(reply_parser.py)."""
