"""Text helpers shared by the V2 index, the V2 query path, the store and the embedding clients.

Normalisation and tokens (`normalize`), stopword lexicons (`lexicon`), entity recognition
(`entities`) and token counting and windows (`tokens`). This package imports nothing from the rest
of the application but configuration-free helpers, so every layer may import it.
"""
