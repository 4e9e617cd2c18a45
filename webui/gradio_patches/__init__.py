"""Every place the page reaches into Gradio's own code or the files it serves, in one room.

Each module is one patch, written for Gradio 6.31.0 (pinned exactly in requirements.txt), with a
test that fails when a Gradio release no longer matches it; README.md beside this file lists them
with why each is there and what a Gradio release must fix for it to go. Nothing here is imported
by this file: gradio_import.py must run before anything imports gradio."""
