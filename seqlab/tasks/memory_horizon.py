"""(being written)"""

def memory_horizon(**kwargs):
    raise NotImplementedError("memory_horizon is being written")
