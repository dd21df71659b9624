package io.enmesh.keycloak.scram;

import jakarta.ws.rs.GET;
import jakarta.ws.rs.POST;
import jakarta.ws.rs.Path;
import jakarta.ws.rs.PathParam;
import jakarta.ws.rs.Produces;
import jakarta.ws.rs.QueryParam;
import jakarta.ws.rs.core.MediaType;
import jakarta.ws.rs.core.Response;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.security.GeneralSecurityException;
import java.security.MessageDigest;
import java.util.Arrays;
import java.util.Base64;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.TreeMap;
import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;
import org.keycloak.credential.CredentialModel;
import org.keycloak.models.ClientModel;
import org.keycloak.models.KeycloakSession;
import org.keycloak.models.RealmModel;
import org.keycloak.models.UserLoginFailureModel;
import org.keycloak.models.UserModel;
import org.keycloak.models.credential.PasswordCredentialModel;
import org.keycloak.models.utils.ModelToRepresentation;
import org.keycloak.services.managers.AppAuthManager;
import org.keycloak.services.managers.AuthenticationManager;
import org.keycloak.services.managers.BruteForceProtector;
import org.keycloak.util.JsonSerialization;

/**
 * SCRAM-SHA-256 keys of a user's password, for enmesh-auth (RFC 5802, RFC 7677).
 *
 * <p>Keycloak's admin API never returns a password hash, so a SCRAM server outside Keycloak
 * has nothing to check a proof against. A pbkdf2-sha256 hash is PBKDF2-HMAC-SHA256 of the
 * password and salt; its first 32 bytes are exactly SCRAM's SaltedPassword for the same salt
 * and iteration count (PBKDF2's first output block does not depend on the output length).
 * This resource answers StoredKey and ServerKey derived from it, as a SCRAM server stores
 * them; never the hash itself. Only the service account of the client enmesh-auth-lookup
 * may ask, and it reports each failed proof, and each right one while the user has failures
 * counted, which Keycloak's brute-force detection (when the realm has it on) counts as it
 * counts a login form's. The username is a query
 * parameter: a name such as "a/b" or ".." stays a name, not a path.
 */
public final class ScramKeysResource {
    static final String LOOKUP_CLIENT = "enmesh-auth-lookup";
    static final String SCRAM_HASH = "pbkdf2-sha256";
    static final String NO_SUCH_USER = "{\"error\":\"no such user\"}";
    private static final int SALTED_PASSWORD_BYTES = 32;

    private final KeycloakSession session;

    ScramKeysResource(KeycloakSession session) {
        this.session = session;
    }

    @GET
    @Path("keys")
    @Produces(MediaType.APPLICATION_JSON)
    public Response keys(@QueryParam("username") String username) throws IOException {
        Optional<Response> refused = refusal();
        if (refused.isPresent()) {
            return refused.get();
        }
        RealmModel realm = session.getContext().getRealm();
        UserModel user = user(realm, username);
        if (user == null) {  // a body, so that enmesh-auth tells it from a missing resource
            return Response.status(Response.Status.NOT_FOUND)
                    .type(MediaType.APPLICATION_JSON)
                    .entity(NO_SUCH_USER)
                    .build();
        }
        Map<String, Object> answer = new TreeMap<>();
        answer.put("username", user.getUsername());
        answer.put("id", user.getId());
        answer.put("usable", usable(realm, user));
        answer.put("failures", failures(realm, user));
        answer.put("passwords", passwordStamps(user));
        answer.put("groups", user.getGroupsStream().map(ModelToRepresentation::buildGroupPath).sorted().toList());
        answer.putAll(scram(user));
        return Response.ok(JsonSerialization.writeValueAsString(answer))
                .header("Cache-Control", "no-store")
                .build();
    }

    /** A proof's result, for Keycloak's brute-force detection: failure or success. */
    @POST
    @Path("{outcome: failure|success}")
    public Response outcome(@PathParam("outcome") String outcome, @QueryParam("username") String username) {
        Optional<Response> refused = refusal();
        if (refused.isPresent()) {
            return refused.get();
        }
        RealmModel realm = session.getContext().getRealm();
        UserModel user = user(realm, username);
        if (user != null && realm.isBruteForceProtected()) {
            BruteForceProtector protector = session.getProvider(BruteForceProtector.class);
            if ("failure".equals(outcome)) {
                protector.failedLogin(realm, user, session.getContext().getConnection(), session.getContext().getUri());
            } else {
                protector.successfulLogin(realm, user, session.getContext().getConnection(), session.getContext().getUri());
            }
        }
        return Response.noContent().build();
    }

    private UserModel user(RealmModel realm, String username) {
        return username == null ? null : session.users().getUserByUsername(realm, username);
    }

    private Optional<Response> refusal() {
        AuthenticationManager.AuthResult auth =
                new AppAuthManager.BearerTokenAuthenticator(session).authenticate();
        if (auth == null) {
            return Optional.of(Response.status(Response.Status.UNAUTHORIZED).build());
        }
        // The token of enmesh-auth-lookup's own service account, and no other: a token whose
        // client is the lookup client but whose user is someone else (token exchange, say)
        // is refused too.
        ClientModel client = auth.client();
        boolean lookup = client != null && LOOKUP_CLIENT.equals(client.getClientId());
        if (!lookup || !client.getId().equals(auth.user().getServiceAccountClientLink())) {
            return Optional.of(Response.status(Response.Status.FORBIDDEN).build());
        }
        return Optional.empty();
    }

    private boolean usable(RealmModel realm, UserModel user) {
        if (!user.isEnabled() || user.getRequiredActionsStream().findAny().isPresent()) {
            return false;
        }
        if (!realm.isBruteForceProtected()) {
            return true;
        }
        BruteForceProtector protector = session.getProvider(BruteForceProtector.class);
        return !protector.isTemporarilyDisabled(session, realm, user)
                && !protector.isPermanentlyLockedOut(session, realm, user);
    }

    /**
     * Each password credential's id and creation time: both change when the password is set
     * or reset, so a login enmesh-auth remembers is trusted again only while they hold.
     */
    private static List<Map<String, Object>> passwordStamps(UserModel user) {
        return user.credentialManager()
                .getStoredCredentialsByTypeStream(PasswordCredentialModel.TYPE)
                .map(c -> Map.<String, Object>of("id", c.getId(), "created", c.getCreatedDate() == null ? 0L : c.getCreatedDate()))
                .toList();
    }

    /**
     * The user's login failures Keycloak counts now (0 with brute-force detection off), so
     * that enmesh-auth reports a success only when there is a count for it to clear: a
     * request less to Keycloak on nearly every login.
     */
    private int failures(RealmModel realm, UserModel user) {
        if (!realm.isBruteForceProtected()) {
            return 0;
        }
        UserLoginFailureModel record = session.loginFailures().getUserLoginFailure(realm, user.getId());
        return record == null ? 0 : record.getNumFailures();
    }

    /** {"scram": {salt, iterations, storedKey, serverKey, credential}} or {"unavailable": why}. */
    private static Map<String, Object> scram(UserModel user) {
        Optional<CredentialModel> stored = user.credentialManager()
                .getStoredCredentialsByTypeStream(PasswordCredentialModel.TYPE)
                .findFirst();
        if (stored.isEmpty()) {
            return Map.of("unavailable", "the user has no password");
        }
        PasswordCredentialModel password = PasswordCredentialModel.createFromCredentialModel(stored.get());
        String algorithm = password.getPasswordCredentialData().getAlgorithm();
        if (!SCRAM_HASH.equals(algorithm)) {
            return Map.of("unavailable", "the password is hashed with " + algorithm + ", not " + SCRAM_HASH);
        }
        byte[] hash = Base64.getDecoder().decode(password.getPasswordSecretData().getValue());
        if (hash.length < SALTED_PASSWORD_BYTES) {
            return Map.of("unavailable", "the password hash is shorter than SHA-256's output");
        }
        byte[] salted = Arrays.copyOf(hash, SALTED_PASSWORD_BYTES);
        try {
            Map<String, Object> keys = new TreeMap<>();
            keys.put("salt", base64(password.getPasswordSecretData().getSalt()));
            keys.put("iterations", password.getPasswordCredentialData().getHashIterations());
            keys.put("storedKey", base64(MessageDigest.getInstance("SHA-256").digest(hmac(salted, "Client Key"))));
            keys.put("serverKey", base64(hmac(salted, "Server Key")));
            keys.put("credential", stored.get().getId());
            return Map.of("scram", keys);
        } catch (GeneralSecurityException e) {
            return Map.of("unavailable", "SHA-256 is not available: " + e.getMessage());
        } finally {
            Arrays.fill(salted, (byte) 0);
            Arrays.fill(hash, (byte) 0);
        }
    }

    private static byte[] hmac(byte[] key, String text) throws GeneralSecurityException {
        Mac mac = Mac.getInstance("HmacSHA256");
        mac.init(new SecretKeySpec(key, "HmacSHA256"));
        return mac.doFinal(text.getBytes(StandardCharsets.US_ASCII));
    }

    private static String base64(byte[] bytes) {
        return Base64.getEncoder().encodeToString(bytes);
    }
}
