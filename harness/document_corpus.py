"""Three documents well past a small model's context (a Markdown manual, a PDF handbook, a Word
field report) with twenty facts in known places and a question for each, worded apart from the
fact (what a user asks, not a copy of the sentence): what retrieval is measured on. Each section
is filler in the document's own words (so that every section shares its vocabulary, as real ones
do) around at most one fact; the filler is made by a seeded generator, so the corpus is the same
on every run."""

from __future__ import annotations

import random
from dataclasses import dataclass

from .document_samples import docx_bytes, pdf_bytes


@dataclass(frozen=True)
class Fact:
    """``sentence`` is in the document ``name``; ``answer`` is a piece of it a right passage holds."""

    name: str
    sentence: str
    question: str
    answer: str


FACTS = [
    Fact("pump_manual.md", "The HX-200 pump is rated for a maximum operating pressure of 42 bar.",
         "How much pressure can the HX-200 take at most?", "42 bar"),
    Fact("pump_manual.md", "Replace the mechanical seal of the HX-200 every 8,000 running hours.",
         "How often should the HX-200's seal be changed?", "8,000 running hours"),
    Fact("pump_manual.md", "The impeller of the LV-50 is cast from duplex stainless steel grade 2205.",
         "What material is the LV-50 impeller made of?", "grade 2205"),
    Fact("pump_manual.md", "Bearings of the LV-50 take lithium complex grease, 15 grams per bearing.",
         "Which lubricant do the LV-50 bearings need, and how much?", "15 grams"),
    Fact("pump_manual.md", "If the motor trips on overload within ten seconds of starting, check that the suction valve is fully open.",
         "The motor cuts out right after start-up. What should I check first?", "suction valve"),
    Fact("pump_manual.md", "The warranty covers manufacturing defects for 36 months from the date of delivery.",
         "How long is the warranty period?", "36 months"),
    Fact("pump_manual.md", "Vibration above 7.1 mm/s RMS on the bearing housing means the pump must be stopped.",
         "At what vibration level must the pump be shut down?", "7.1 mm/s"),
    Fact("handbook.pdf", "Employees receive 27 days of paid annual leave, plus public holidays.",
         "How many vacation days do staff get each year?", "27 days"),
    Fact("handbook.pdf", "The office in Tromso opens at 07:30 and closes at 16:00 on weekdays.",
         "What are the opening hours of the Tromso office?", "07:30"),
    Fact("handbook.pdf", "Travel expenses must be filed within 30 days through the Ledgerly portal.",
         "Where and by when do I submit my travel costs?", "Ledgerly"),
    Fact("handbook.pdf", "New employees are assigned a mentor, called a buddy, for their first 90 days.",
         "Does a new hire get someone to help them settle in?", "buddy"),
    Fact("handbook.pdf", "Parental leave is paid at full salary for 49 weeks.",
         "How long is paid parental leave?", "49 weeks"),
    Fact("handbook.pdf", "Security incidents are reported to the duty officer on extension 4411.",
         "Who do I call about a security incident?", "4411"),
    Fact("handbook.pdf", "The pension scheme matches employee contributions up to 6 percent of salary.",
         "How much does the company add to my retirement savings?", "6 percent"),
    Fact("field_report.docx", "We counted 1,284 breeding pairs of Atlantic puffins on Hornoya in June.",
         "How many puffin pairs were breeding on Hornoya?", "1,284"),
    Fact("field_report.docx", "Sea surface temperature at the Vardo station averaged 6.8 degrees Celsius in July.",
         "How warm was the sea near Vardo in July?", "6.8 degrees"),
    Fact("field_report.docx", "Kittiwake chicks fledged after a mean of 43 days in the nest.",
         "How long did kittiwake young stay in the nest before flying?", "43 days"),
    Fact("field_report.docx", "Sand eels made up 71 percent of the prey delivered to puffin chicks.",
         "What share of the puffin chicks' food was sand eel?", "71 percent"),
    Fact("field_report.docx", "The survey team used a DJI Matrice drone flying at 60 metres altitude.",
         "What aircraft did the researchers fly for counting, and how high?", "Matrice"),
    Fact("field_report.docx", "A storm on 14 July destroyed roughly 200 razorbill nests on the lower ledges.",
         "What happened to the razorbill nests during the bad weather?", "200 razorbill"),
]

_TOPICS = {
    "pump_manual.md": ["Installation", "Commissioning", "Suction piping", "Discharge piping", "Alignment", "Seals", "Bearings",
                       "Lubrication", "Motor", "Electrical connection", "Start-up", "Shutdown", "Inspection", "Cleaning",
                       "Spare parts", "Troubleshooting", "Noise", "Vibration", "Cavitation", "Storage", "Transport", "Warranty",
                       "Impeller", "Casing", "Coupling", "Flow control", "Pressure gauges", "Drainage", "Frost protection",
                       "Corrosion", "Gaskets", "Bolting", "Maintenance schedule", "Records", "Safety"],
    "handbook.pdf": ["Welcome", "Working hours", "Offices", "Leave", "Sick leave", "Parental leave", "Salary", "Pension", "Insurance",
                     "Travel", "Expenses", "Equipment", "Security", "Privacy", "Onboarding", "Training", "Reviews", "Conduct",
                     "Remote work", "Overtime", "Health", "Meals", "Parking", "Leaving the company", "Contacts"],
    "field_report.docx": ["Summary", "Study area", "Methods", "Weather", "Sea temperature", "Puffins", "Kittiwakes", "Razorbills",
                          "Guillemots", "Fulmars", "Diet", "Breeding success", "Predation", "Disturbance", "Drone survey",
                          "Ringing", "Colony maps", "Chick growth", "Adult survival", "Discussion", "Recommendations",
                          "Acknowledgements", "Data", "Limitations", "Future work"],
}
_WORDS = {
    "pump_manual.md": ["pump", "operator", "valve", "flange", "shaft", "housing", "piping", "motor", "seal", "bearing", "fluid",
                       "pressure", "temperature", "flow", "torque", "bolt", "gasket", "filter", "strainer", "drain"],
    "handbook.pdf": ["employee", "manager", "team", "office", "policy", "salary", "leave", "request", "approval", "colleague",
                     "department", "schedule", "contract", "benefit", "portal", "form", "meeting", "budget", "holiday", "week"],
    "field_report.docx": ["colony", "seabird", "nest", "ledge", "chick", "adult", "survey", "island", "count", "prey", "fish",
                          "season", "observer", "transect", "plot", "cliff", "egg", "weather", "wind", "sample"],
}
_SENTENCES = [
    "The {a} should be checked against the {b} before any work on the {c} begins.",
    "In most cases the {a} and the {b} are handled by the same {c}.",
    "Records of each {a} are kept together with notes on the {b}.",
    "A {a} that differs from the {b} is reported to the {c} in writing.",
    "Unless stated otherwise, the {a} follows the usual {b} procedure.",
    "Each {a} is described in the appendix, with the {b} it depends on.",
    "The {a} may vary with the {b}, so the {c} is reviewed every season.",
    "Where a {a} is missing, the {b} is noted and the {c} is informed.",
    "Experience shows that a careful {a} saves time later with the {b}.",
    "The table below lists the {a}, the {b} and the {c} for reference.",
]


def sections(name: str, count: int, seed: int = 7) -> list[tuple[str, str]]:
    """The document's (heading, body) sections, its facts spread among them."""
    chance = random.Random(f"{seed}:{name}")
    topics, words = _TOPICS[name], _WORDS[name]
    facts = [fact.sentence for fact in FACTS if fact.name == name]
    places = chance.sample(range(count), len(facts))
    out = []
    for index in range(count):
        sentences = [chance.choice(_SENTENCES).format(a=chance.choice(words), b=chance.choice(words), c=chance.choice(words))
                     for _ in range(chance.randint(5, 8))]
        if index in places:
            sentences.insert(chance.randint(1, len(sentences)), facts[places.index(index)])
        out.append((f"{index + 1}. {topics[index % len(topics)]}", " ".join(sentences)))
    return out


def manual_text(count: int = 70) -> str:
    return "\n\n".join(f"## {heading}\n\n{body}" for heading, body in sections("pump_manual.md", count))


def handbook_pdf(count: int = 60, per_page: int = 1) -> bytes:
    """``per_page`` sections a page (one: a short page; four fill a printed page, some 2,500
    characters), their bodies in lines of a printed page's width."""
    pages = []
    written = sections("handbook.pdf", count)
    for start in range(0, count, per_page):
        lines = []
        for heading, body in written[start:start + per_page]:
            lines.append(heading)
            line = ""
            for word in body.split():
                if len(line) + len(word) > 90:
                    lines.append(line)
                    line = ""
                line = f"{line} {word}".strip()
            lines.append(line)
        pages.append("\n".join(lines))
    return pdf_bytes(pages)


def field_report_docx(count: int = 60) -> bytes:
    return docx_bytes([part for heading, body in sections("field_report.docx", count) for part in (heading, body)])


def corpus() -> dict[str, bytes]:
    """The three documents by file name."""
    return {"pump_manual.md": manual_text().encode(), "handbook.pdf": handbook_pdf(), "field_report.docx": field_report_docx()}


_VERBS = ["load", "save", "count", "check", "merge", "split", "price", "ship", "order", "audit", "restock", "label"]
_NOUNS = ["stock", "shelf", "invoice", "parcel", "supplier", "pallet", "barcode", "refund", "batch", "route", "crate", "ledger"]


def inventory_code(functions: int = 128, classes: int = 6, seed: int = 7) -> str:
    """A Python module of about 40 KB defining ``functions`` functions and ``classes`` classes
    (records without methods, so that "how many functions" has one answer): what a question
    about a whole code file is asked of. Comments and docstrings that look like code ("def" in
    prose) are in it too, which a count by text search would take for definitions."""
    chance = random.Random(f"{seed}:inventory")
    names = [f"{verb}_{noun}" for verb in _VERBS for noun in _NOUNS]
    chance.shuffle(names)
    blocks = ['"""Inventory of a warehouse: every def here keeps the stock and the ledger in step."""\n\nfrom dataclasses import dataclass']
    for index in range(classes):
        noun = _NOUNS[index].capitalize()
        blocks.append(f"@dataclass\nclass {noun}Record:\n    \"\"\"One {noun.lower()} as the ledger keeps it.\"\"\"\n\n"
                      f"    key: str\n    quantity: int = 0\n    note: str = \"\"")
    for name in names[:functions]:
        verb, noun = name.split("_")
        steps = chance.randint(2, 5)
        body = "\n".join(f"    {noun}_{step} = {noun}_{step - 1} * {chance.randint(2, 9)} + len(key) % {chance.randint(3, 11)}"
                         for step in range(1, steps + 1))
        blocks.append(f"def {name}(key: str, {noun}_0: int = 0) -> int:\n"
                      f"    \"\"\"{verb.capitalize()} the {noun} for ``key``; the def of the old system did it by hand.\"\"\"\n"
                      f"{body}\n    return {noun}_{steps}")
    return "\n\n\n".join(blocks) + "\n"
