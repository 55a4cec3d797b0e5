"""Text extraction from HTML: the web archives' documents become text inside the read task,
before curation, hashing and tokenizing (extract/html.py; the config section in extract/config.py).
"""
