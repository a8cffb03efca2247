"""The diagnosis's checks by topic, each a function `(Context, Found) -> list[Finding]`; the order
they run in and what each code suppresses are declared in `attnlab.diagnosis.codes`."""
