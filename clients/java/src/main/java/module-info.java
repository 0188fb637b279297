/**
 * The Java client of lockgate, distributed locks on Redis over HTTP: {@link
 * java.util.concurrent.locks.Lock}s held through streamed locks the gateway
 * renews, whose loss is told. The JDK only ({@code java.net.http}).
 */
module lockgate {
    requires java.net.http;

    exports lockgate;
}
