"""A real SMTP server for the e-mail tests (aiosmtpd on a port of this machine): it keeps every
message it accepted, can refuse chosen addresses for good (a bounce), and can be stopped and
started again on the same port (a mail server down for a while)."""

from __future__ import annotations

import email
import email.policy
from email.message import EmailMessage
from typing import Any

from aiosmtpd.controller import Controller

from tests.server.live import free_port


class _Keeper:
    def __init__(self, refuse: set[str]) -> None:
        self.messages: list[EmailMessage] = []
        self.refuse = refuse

    async def handle_RCPT(self, server: Any, session: Any, envelope: Any, address: str,
                          rcpt_options: list[str]) -> str:
        if address in self.refuse:
            return "550 5.1.1 no such mailbox here"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        msg = email.message_from_bytes(envelope.content, policy=email.policy.default)
        assert isinstance(msg, EmailMessage)
        self.messages.append(msg)
        return "250 Message accepted for delivery"


class MailServer:
    """An SMTP server on 127.0.0.1:`port` (plain SMTP: the tests' settings say `none`)."""

    def __init__(self, refuse: set[str] | None = None) -> None:
        self.port = free_port()
        self.keeper = _Keeper(refuse or set())
        self.controller: Controller | None = None

    @property
    def messages(self) -> list[EmailMessage]:
        return self.keeper.messages

    def start(self) -> MailServer:
        self.controller = Controller(self.keeper, hostname="127.0.0.1", port=self.port)
        self.controller.start()
        return self

    def stop(self) -> None:
        if self.controller is not None:
            self.controller.stop()
            self.controller = None

    def env(self) -> dict[str, str]:
        """The server's settings that send to it, as environment variables."""
        return {"PARAGRADE_SERVER_SMTP_HOST": "127.0.0.1",
                "PARAGRADE_SERVER_SMTP_PORT": str(self.port),
                "PARAGRADE_SERVER_SMTP_SECURITY": "none"}
