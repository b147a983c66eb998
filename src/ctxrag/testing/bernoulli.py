"""A four-passage knowledge base about the Bernoulli family and Leonhard Euler, with hand-written triplets.

The multi-hop question of issue #8, "What contribution did the son of Euler's teacher make?", needs
Euler -> teacher Johann Bernoulli -> son Daniel Bernoulli -> fluid dynamics. Daniel's passage never names Euler or
a teacher, so plain vector search has to guess it.
"""
from __future__ import annotations

QUESTION = "What contribution did the son of Euler's teacher make?"
ANSWER_ID = "daniel"

PASSAGES: dict[str, str] = {
    "jakob": (
        "Jakob Bernoulli\nJakob Bernoulli (1655-1705) was a Swiss mathematician from Basel and the elder brother of "
        "Johann Bernoulli. His major contribution was to probability theory: his book Ars Conjectandi proved the first "
        "law of large numbers. He also discovered the constant e while studying compound interest."
    ),
    "johann": (
        "Johann Bernoulli\nJohann Bernoulli (1667-1748) was a Swiss mathematician who taught at the University of Basel. "
        "He was the younger brother of Jakob Bernoulli and the father of Daniel Bernoulli. Johann Bernoulli was the "
        "teacher of the young Leonhard Euler, whom he tutored privately on Saturday afternoons."
    ),
    "daniel": (
        "Daniel Bernoulli\nDaniel Bernoulli (1700-1782) was a Swiss physicist born in Groningen, the son of Johann "
        "Bernoulli. He is remembered for fluid dynamics: in his book Hydrodynamica (1738) he stated Bernoulli's "
        "principle, which relates the pressure of a moving fluid to its speed."
    ),
    "euler": (
        "Leonhard Euler\nLeonhard Euler (1707-1783) was a Swiss mathematician and physicist born in Basel. As a student "
        "he attended lessons from Johann Bernoulli, who recognised his talent. Euler introduced much of modern "
        "mathematical notation and made contributions to graph theory, mechanics and number theory."
    ),
}

TRIPLETS: dict[str, list[list[str]]] = {
    "jakob": [
        ["Jakob Bernoulli", "was", "Swiss mathematician"],
        ["Jakob Bernoulli", "brother of", "Johann Bernoulli"],
        ["Jakob Bernoulli", "wrote", "Ars Conjectandi"],
        ["Ars Conjectandi", "proved", "law of large numbers"],
        ["Jakob Bernoulli", "discovered", "constant e"],
    ],
    "johann": [
        ["Johann Bernoulli", "taught at", "University of Basel"],
        ["Johann Bernoulli", "brother of", "Jakob Bernoulli"],
        ["Johann Bernoulli", "father of", "Daniel Bernoulli"],
        ["Johann Bernoulli", "teacher of", "Leonhard Euler"],
    ],
    "daniel": [
        ["Daniel Bernoulli", "born in", "Groningen"],
        ["Daniel Bernoulli", "son of", "Johann Bernoulli"],
        ["Daniel Bernoulli", "contributed to", "fluid dynamics"],
        ["Daniel Bernoulli", "wrote", "Hydrodynamica"],
        ["Hydrodynamica", "states", "Bernoulli's principle"],
    ],
    "euler": [
        ["Leonhard Euler", "born in", "Basel"],
        ["Leonhard Euler", "student of", "Johann Bernoulli"],
        ["Leonhard Euler", "introduced", "mathematical notation"],
        ["leonhard  Euler", "contributed to", "graph theory"],
    ],
}
