def upper(b):
    return b.decode("utf-8").upper().encode("utf-8")
