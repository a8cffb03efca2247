"""The diagnosis's checks by topic, each a function `(Context, Found) -> list[Finding]` with the
codes it may return declared beside it; the order they run in and what each code suppresses are in
`attnlab.diagnosis.codes`."""
