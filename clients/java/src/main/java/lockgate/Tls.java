package lockgate;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.GeneralSecurityException;
import java.security.KeyFactory;
import java.security.KeyStore;
import java.security.PrivateKey;
import java.security.cert.Certificate;
import java.security.cert.CertificateFactory;
import java.security.spec.PKCS8EncodedKeySpec;
import java.util.ArrayList;
import java.util.Base64;
import java.util.Collection;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import javax.net.ssl.KeyManagerFactory;
import javax.net.ssl.SSLContext;
import javax.net.ssl.TrustManagerFactory;

/**
 * An {@link SSLContext} from PEM files, as {@code scripts/make-certs.sh} and
 * most tools write them: a CA bundle to trust (instead of the JDK's), and a
 * client certificate (its chain) with its private key (PKCS#8 {@code PRIVATE
 * KEY}, SEC1 {@code EC PRIVATE KEY} or PKCS#1 {@code RSA PRIVATE KEY}, not
 * encrypted), for a gateway started with {@code --tls-client-ca}.
 */
final class Tls {
    private Tls() {}

    private static final Pattern BLOCK = Pattern.compile(
            "-----BEGIN ([A-Z0-9 ]+)-----([A-Za-z0-9+/=\\s]+)-----END \\1-----");
    private static final byte[] RSA_ALGORITHM = der(0x30, concat(der(0x06, bytes(0x2A, 0x86, 0x48, 0x86, 0xF7, 0x0D,
            0x01, 0x01, 0x01)), der(0x05, new byte[0])));
    private static final byte[] EC_PUBLIC_KEY = der(0x06, bytes(0x2A, 0x86, 0x48, 0xCE, 0x3D, 0x02, 0x01));

    static SSLContext context(Path caBundle, Path certificate, Path privateKey) {
        try {
            TrustManagerFactory trust = null;
            if (caBundle != null) {
                KeyStore roots = KeyStore.getInstance("PKCS12");
                roots.load(null, null);
                int n = 0;
                for (Certificate ca : certificates(caBundle)) {
                    roots.setCertificateEntry("ca-" + n++, ca);
                }
                trust = TrustManagerFactory.getInstance(TrustManagerFactory.getDefaultAlgorithm());
                trust.init(roots);
            }
            KeyManagerFactory keys = null;
            if (certificate != null || privateKey != null) {
                if (certificate == null || privateKey == null) {
                    throw new IllegalArgumentException("a client certificate needs both its certificate and its key");
                }
                char[] password = new char[0];
                KeyStore store = KeyStore.getInstance("PKCS12");
                store.load(null, null);
                store.setKeyEntry("client", privateKey(privateKey), password,
                        certificates(certificate).toArray(new Certificate[0]));
                keys = KeyManagerFactory.getInstance(KeyManagerFactory.getDefaultAlgorithm());
                keys.init(store, password);
            }
            SSLContext context = SSLContext.getInstance("TLS");
            context.init(keys == null ? null : keys.getKeyManagers(), trust == null ? null : trust.getTrustManagers(),
                    null);
            return context;
        } catch (IOException | GeneralSecurityException e) {
            throw new IllegalArgumentException("lockgate: reading the TLS files: " + e.getMessage(), e);
        }
    }

    private static List<Certificate> certificates(Path file) throws IOException, GeneralSecurityException {
        try (InputStream in = Files.newInputStream(file)) {
            Collection<? extends Certificate> found = CertificateFactory.getInstance("X.509").generateCertificates(in);
            if (found.isEmpty()) {
                throw new IllegalArgumentException("no PEM certificate in " + file);
            }
            return new ArrayList<>(found);
        }
    }

    private static PrivateKey privateKey(Path file) throws IOException, GeneralSecurityException {
        String text = Files.readString(file, StandardCharsets.US_ASCII);
        Matcher block = BLOCK.matcher(text);
        while (block.find()) {
            byte[] der = Base64.getMimeDecoder().decode(block.group(2));
            switch (block.group(1)) {
                case "PRIVATE KEY":
                    return pkcs8(der);
                case "EC PRIVATE KEY":
                    return pkcs8(wrap(der(0x30, concat(EC_PUBLIC_KEY, sec1Curve(der))), der));
                case "RSA PRIVATE KEY":
                    return pkcs8(wrap(RSA_ALGORITHM, der));
                case "ENCRYPTED PRIVATE KEY":
                    throw new IllegalArgumentException(file + " holds an encrypted key: decrypt it first "
                            + "(openssl pkcs8 -in KEY -out PLAIN)");
                default:
                    break;
            }
        }
        throw new IllegalArgumentException("no PEM private key in " + file);
    }

    private static PrivateKey pkcs8(byte[] der) throws GeneralSecurityException {
        GeneralSecurityException last = null;
        for (String algorithm : new String[] {"EC", "RSA", "Ed25519", "Ed448"}) {
            try {
                return KeyFactory.getInstance(algorithm).generatePrivate(new PKCS8EncodedKeySpec(der));
            } catch (GeneralSecurityException e) {
                last = e;
            }
        }
        throw last;
    }

    /** A PKCS#8 PrivateKeyInfo of {@code key} with {@code algorithm}: SEQUENCE { 0, algorithm, OCTET STRING key }. */
    private static byte[] wrap(byte[] algorithm, byte[] key) {
        return der(0x30, concat(der(0x02, new byte[] {0}), algorithm, der(0x04, key)));
    }

    /** The curve's OID (its whole TLV) of a SEC1 ECPrivateKey: SEQUENCE { 1, OCTET STRING, [0] { OID } ... }. */
    private static byte[] sec1Curve(byte[] der) {
        int[] at = {0};
        expect(der, at, 0x30);
        length(der, at);
        for (int field = 0; field < 4 && at[0] < der.length; field++) {
            int tag = der[at[0]++] & 0xff;
            int length = length(der, at);
            if (tag == 0xA0) {
                byte[] oid = new byte[length];
                System.arraycopy(der, at[0], oid, 0, length);
                return oid;
            }
            at[0] += length;
        }
        throw new IllegalArgumentException("an EC private key that names no curve: convert it to PKCS#8 "
                + "(openssl pkcs8 -topk8 -nocrypt -in KEY -out KEY8)");
    }

    private static void expect(byte[] der, int[] at, int tag) {
        if ((der[at[0]++] & 0xff) != tag) {
            throw new IllegalArgumentException("not a DER key");
        }
    }

    private static int length(byte[] der, int[] at) {
        int first = der[at[0]++] & 0xff;
        if (first < 0x80) {
            return first;
        }
        int length = 0;
        for (int i = 0; i < (first & 0x7f); i++) {
            length = (length << 8) | (der[at[0]++] & 0xff);
        }
        return length;
    }

    private static byte[] der(int tag, byte[] content) {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        out.write(tag);
        int length = content.length;
        if (length < 0x80) {
            out.write(length);
        } else {
            int bytes = length > 0xffffff ? 4 : length > 0xffff ? 3 : length > 0xff ? 2 : 1;
            out.write(0x80 | bytes);
            for (int i = bytes - 1; i >= 0; i--) {
                out.write((length >> (8 * i)) & 0xff);
            }
        }
        out.writeBytes(content);
        return out.toByteArray();
    }

    private static byte[] concat(byte[]... parts) {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        for (byte[] part : parts) {
            out.writeBytes(part);
        }
        return out.toByteArray();
    }

    private static byte[] bytes(int... values) {
        byte[] out = new byte[values.length];
        for (int i = 0; i < values.length; i++) {
            out[i] = (byte) values[i];
        }
        return out;
    }
}
