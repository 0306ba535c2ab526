"""The app's controls of a running agent: each one a command appended to the run folder's
control channel (control.py), so the app never waits on the agent."""

from __future__ import annotations

from cuda_agent.control import send
from cuda_agent.tui import agent_process
from cuda_agent.tui.screens import ApprovalScreen, MessageScreen, QuitScreen


class Steering:
    """Actions of RunApp (a Textual App) that steer the agent, with the app's `view`, `agent`, `resume_with`,
    `_asking` and `_deferred` (RunApp.__init__ says what they are)."""

    def _live(self) -> bool:
        if not self.view.live():
            self.notify("the agent is not running: r resumes the run", severity="warning")
            return False
        return True

    def action_pause(self) -> None:
        if self._live():
            state = self.view.control_state()
            paused = bool(state and state.paused)
            send(self.view.run_dir, "resume" if paused else "pause")
            self.notify("resuming" if paused else "pausing before the next step")

    def action_approve_mode(self) -> None:
        if self._live():
            state = self.view.control_state()
            on = not (state and state.approve_mode)
            send(self.view.run_dir, "approve_mode", on=on)
            self.notify(f"approve mode {'on: each tool call waits for you' if on else 'off'}")

    def action_message(self) -> None:
        if self._live():
            self.push_screen(MessageScreen(), self._send_message)

    def _send_message(self, text: str | None) -> None:
        if text:
            send(self.view.run_dir, "inject", text=text)
            self.notify("sent: the model reads it at its next turn")

    def action_stop(self) -> None:
        if self._live():
            send(self.view.run_dir, "stop")
            self.notify("stopping after the current step; everything is kept (r resumes)")

    def _ask(self, call) -> None:
        self._asking.add(call.id)

        def decided(result: dict | None) -> None:
            if result is None:
                self._asking.discard(call.id)
                self._deferred.add(call.id)
            else:
                send(self.view.run_dir, "decide", **result)

        self.push_screen(ApprovalScreen(call), decided)

    def action_open_pending(self) -> None:
        """Open the approval of calls deferred with Escape."""
        self._deferred.clear()
        state = self.view.control_state()
        if not (state and state.pending):
            self.notify("no tool call is waiting for a decision")

    def action_resume_run(self) -> None:
        from cuda_agent.workspace.run_lock import run_holder

        if self.view.live():
            self.notify("the run is already going")
        elif holder := run_holder(self.view.run.history):  # an MCP client's run, say
            self.notify(
                f"this run is being run by another process ({holder}): it can be followed here, "
                "and resumed once it ends",
                severity="warning",
            )
        elif (request := self.resume_request()) is None:
            self.notify(
                "no model known for this run: start the app with `cuda-agent tui RUN_DIR --model M` (or --script FILE)",
                severity="error",
            )
        else:
            try:
                self.agent, _ = agent_process.start_agent(request, self.view.run.agent_log)
                self.notify("resumed")
            except RuntimeError as e:
                self.notify(str(e), severity="error")

    def resume_request(self):
        """The run continued with what `cuda-agent tui` was given, else what it was launched with."""
        from cuda_agent.run import RunRequest, RunSpec

        if self.resume_with is not None:
            settings, script = self.resume_with
        else:
            launch = self.view.launch()
            if launch is None:
                return None
            settings, script = launch.settings, launch.script
        if not (script or settings.model):
            return None
        return RunRequest(spec=RunSpec(resume=self.view.run_dir, script=script), settings=settings, control=True)

    def action_quit_app(self) -> None:
        if self.view.live() and (self.agent is None or self.agent.running()):
            self.push_screen(QuitScreen(), self._quit_choice)
        else:
            self.exit()

    def _quit_choice(self, choice: str) -> None:
        if choice == "stop":
            send(self.view.run_dir, "stop")
        if choice in ("stop", "detach"):
            self.exit(choice)  # what `optimize --tui` says after the app closes (tui/launch.py)
