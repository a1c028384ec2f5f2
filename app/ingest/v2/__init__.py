"""V2 index side: normalisation, entities, boilerplate, structure-aware chunking (pure)."""
