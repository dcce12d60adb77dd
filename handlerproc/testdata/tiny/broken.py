def handle(data, context)
    return data
