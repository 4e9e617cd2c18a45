"""The page's languages: one catalog of its words (catalog.py, a file per language beside it),
the language each page speaks (chosen_language.py) and the Settings tab's choice of it (chooser.py)."""

from .catalog import PAGE_I18N, said, text

__all__ = ["PAGE_I18N", "said", "text"]
