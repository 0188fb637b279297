/**
 * A small TCP proxy in front of the gateway that can misbehave on purpose:
 * forward a request and drop the connection before the answer gets back (an
 * answer lost in the network), cut every open connection (a dropped
 * stream), silence them without closing them (a dead peer behind a
 * firewall), refuse new connections while the open ones go on, or change
 * what the requests say on the way (a gateway that reads them otherwise).
 */

import { createServer, connect, type Server, type Socket } from "node:net";

export class FaultyProxy {
  /** How many of the next connections get their request through and their answer dropped. */
  dropAnswers = 0;
  /** New connections are closed at once; open ones go on. */
  refuseNew = false;
  /** Rewrites each piece of a request (its text as latin1) before the gateway gets it. */
  rewrite: ((request: string) => string) | undefined;
  private readonly sent: { text: string }[] = [];
  private readonly open = new Set<Socket>();
  /** Connections whose answers are swallowed from now on, the connection left open. */
  private readonly muted = new Set<Socket>();

  private constructor(
    private readonly server: Server,
    readonly port: number,
  ) {}

  static start(targetPort: number): Promise<FaultyProxy> {
    return new Promise((done, fail) => {
      let proxy: FaultyProxy;
      const server = createServer((client) => proxy.accept(client, targetPort));
      server.once("error", fail);
      server.listen(0, "127.0.0.1", () => {
        proxy = new FaultyProxy(server, (server.address() as { port: number }).port);
        done(proxy);
      });
    });
  }

  get url(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  /** What each connection sent (its requests, heads and bodies), in order of connection. */
  get requests(): string[] {
    return this.sent.map((connection) => connection.text).filter((text) => text !== "");
  }

  /** Starts the record of requests afresh (a kept-alive connection records on). */
  forgetRequests(): void {
    for (const connection of this.sent) connection.text = "";
  }

  private accept(client: Socket, targetPort: number): void {
    if (this.refuseNew) {
      client.destroy();
      return;
    }
    const dropAnswer = this.dropAnswers > 0;
    if (dropAnswer) this.dropAnswers--;
    const upstream = connect(targetPort, "127.0.0.1");
    this.open.add(client);
    this.open.add(upstream);
    const record = { text: "" };
    this.sent.push(record);
    const closeBoth = () => {
      client.destroy();
      upstream.destroy();
      this.open.delete(client);
      this.open.delete(upstream);
      this.muted.delete(client);
    };
    client.on("data", (chunk: Buffer) => {
      const text = chunk.toString("latin1");
      record.text += text;
      upstream.write(this.rewrite ? Buffer.from(this.rewrite(text), "latin1") : chunk);
    });
    upstream.on("data", (chunk: Buffer) => {
      // The gateway has done the work and answers: the answer never arrives.
      if (dropAnswer) closeBoth();
      else if (!this.muted.has(client)) client.write(chunk);
    });
    client.on("end", () => upstream.end());
    upstream.on("end", () => client.end());
    client.on("error", closeBoth);
    upstream.on("error", closeBoth);
    client.on("close", closeBoth);
    upstream.on("close", closeBoth);
  }

  /** Silences every open connection: nothing more reaches the client, and nothing closes. */
  muteAll(): void {
    for (const socket of this.open) this.muted.add(socket);
  }

  /** Cuts every open connection, as a network fault would. */
  cutAll(): void {
    for (const socket of this.open) socket.destroy();
    this.open.clear();
  }

  close(): Promise<void> {
    this.cutAll();
    return new Promise((done) => this.server.close(() => done()));
  }
}
