"""Small word lists V2 uses for language detection, query terms and refusal phrases (English, German)."""

from __future__ import annotations

from collections.abc import Mapping

from app.text.normalize import fold


def _folded(words: list[str]) -> frozenset[str]:
    """The words as normalised text holds them (umlauts written out: "für" is "fuer")."""
    return frozenset(fold(word) for word in words)


# Function words only: frequent enough to identify a language, never the content of a question.
STOPWORDS_EN = _folded(
    """a about above after again all also am an and any are as at be because been before being below
    between both but by can could did do does doing down during each few for from further had has have
    having he her here hers him his how i if in into is it its itself just me more most my no nor not
    now of off on once only or other our ours out over own same she should so some such than that the
    their theirs them then there these they this those through to too under until up very was we were
    what when where which while who whom why will with would you your yours""".split()
)
STOPWORDS_DE = _folded(
    """aber alle allem allen aller alles als also am an ander andere anderem anderen anderer anderes auch
    auf aus bei bin bis bist da damit dann das dass dein deine dem den denn der des dich die dies diese
    diesem diesen dieser dieses dir doch dort du durch ein eine einem einen einer eines er es etwas euch
    euer für gegen gewesen hab habe haben hat hatte hier hin hinter ich ihm ihn ihnen ihr ihre im in
    indem ins ist jede jedem jeden jeder jedes jene kann kein keine können man manche mein meine mich
    mir mit muss nach nicht nichts noch nun nur ob oder ohne sehr sein seine sich sie sind so solche
    soll sondern sonst über um und uns unser unter viel vom von vor wann war waren warum was weil
    welche welchem welchen welcher welches wenn wer werde werden wie wieder will wir wird wo wollen
    zu zum zur zwar zwischen""".split()
)
STOPWORD_PROFILES: Mapping[str, frozenset[str]] = {"en": STOPWORDS_EN, "de": STOPWORDS_DE}

# How people phrase a question, not what they ask about: question words, quantity words, light and
# modal verbs, and what normalisation leaves of contractions ("it's" -> "it" "s", "don't" -> "don"
# "t"). They are no query term: no channel looks for them and the refusal does not miss them.
QUESTION_WORDS_EN = _folded(
    """s t d ll m re ve don doesn didn isn aren wasn weren won wouldn shouldn couldn can cannot hasn
    haven hadn mustn needn let lets much many whether way ways anything something anyone someone
    need needs needed want wants wanted keep keeps use used using uses please tell know possible
    able thing things really actually happen happens exactly""".split()
)
QUESTION_WORDS_DE = _folded(
    """wodurch wofür wofur woran womit wozu woher wohin worin worauf worüber woruber weshalb wieso
    welchen wieviel wieviele viele vielen wieviel darf dürfen durfen sollte sollten soll muss müssen
    mussen brauche brauchst braucht brauchen gibt gibts geht gehen steht stehen liefert liefern
    macht machen mache tun tut lässt lasst lassen bekomme bekommt kriege kriegt finde findet sehe
    sieht möchte mochte möchten mochten würde wurde könnte konnte kannst könnt bitte genau eigentlich
    überhaupt uberhaupt denn mal irgendwie""".split()
)
QUESTION_WORDS = QUESTION_WORDS_EN | QUESTION_WORDS_DE
