"""(being written)"""

def listops(**kwargs):
    raise NotImplementedError("listops is being written")
