"""(being written)"""

def text(**kwargs):
    raise NotImplementedError("text is being written")
