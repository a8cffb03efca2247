"""Drawing: PNG encoding, text, colour tables and threads for attnlab's pictures; nothing here knows
what attention is (attnlab.reporting.heatmap draws the maps with it)."""
