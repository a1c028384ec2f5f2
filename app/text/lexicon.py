"""Small word lists V2 uses for language detection, query terms and refusal phrases (English, German)."""

from __future__ import annotations

from collections.abc import Mapping

# Function words only: frequent enough to identify a language, never the content of a question.
STOPWORDS_EN = frozenset(
    """a about above after again all also am an and any are as at be because been before being below
    between both but by can could did do does doing down during each few for from further had has have
    having he her here hers him his how i if in into is it its itself just me more most my no nor not
    now of off on once only or other our ours out over own same she should so some such than that the
    their theirs them then there these they this those through to too under until up very was we were
    what when where which while who whom why will with would you your yours""".split()
)
STOPWORDS_DE = frozenset(
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
