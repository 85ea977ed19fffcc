"""JupyterLab's kernel manager for the lessons: a restart answers once the new kernel does.

After Kernel > Restart, jupyter_server answers the restart request as soon as the new kernel's process is launched.
JupyterLab reconnects at once, and the server's reconnect probe asks the kernel for ``kernel_info`` on a pair of
throwaway channels every 0.5 s until one answers. An ipykernel 7 kernel takes 1-1.5 s to start, so three or four
requests queue; the first reply closes the probe's channels, and pyzmq logs ``Got events for closed stream`` for each
later reply (harmless, and alarming in a student's terminal: 4 restarts in 7 showed it). Waiting for the new kernel's
first reply before answering the restart leaves one probe and no warning (0 in 8)."""
from __future__ import annotations

import contextlib

from jupyter_server.services.kernels.kernelmanager import AsyncMappingKernelManager

__all__ = ["ReadyRestartKernelManager"]


class ReadyRestartKernelManager(AsyncMappingKernelManager):
    """``restart_kernel`` returns after the new kernel has answered its first ``kernel_info`` request."""

    async def restart_kernel(self, kernel_id, now=False):
        ready = await super().restart_kernel(kernel_id, now=now)   # resolves on the new kernel's first reply
        with contextlib.suppress(Exception):                        # a timeout or failed restart is reported as before
            await ready
        return ready
