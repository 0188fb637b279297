package lockgate;

/** How a lock is held: alone ({@code exclusive}, also a counting lock's places) or beside other readers ({@code shared}). */
public enum LockMode implements Wire.Named {
    /** One holder alone, or one of a counting lock's places: a writer. */
    EXCLUSIVE("exclusive"),
    /** Beside any number of other shared holders, while no writer holds it or waits ahead: a reader. */
    SHARED("shared");

    private final String wire;

    LockMode(String wire) {
        this.wire = wire;
    }

    /** The mode's name on the wire: {@code exclusive} or {@code shared}. */
    @Override
    public String wire() {
        return wire;
    }
}
