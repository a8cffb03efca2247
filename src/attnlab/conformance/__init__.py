"""The zoo survey: `variant=hf:TYPE` for every model type of the installed transformers, at small
sizes, each in a time limit, as a conformance table (CSV) and a generated documentation page.

    python -m attnlab.zoo --out zoo_survey --jobs 2        # run (resumes: done types are skipped)
    python -m attnlab.zoo --out zoo_survey --table-only    # rebuild the CSV and page from disk
"""
